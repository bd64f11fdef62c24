// Domain module
