// Kafka module
