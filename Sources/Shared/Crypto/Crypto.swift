// Crypto module
