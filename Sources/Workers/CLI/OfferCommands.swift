/// `signer`, `offer sign` (issue 4).
let offerCommands: [CLICommand] = []
