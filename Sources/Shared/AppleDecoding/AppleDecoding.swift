// AppleDecoding module
