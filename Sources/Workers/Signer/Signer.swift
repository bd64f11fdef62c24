// Signer module: the promotional-offer signing worker (issue 4).
