/// `receipt decode`, `jws verify` (issue 3).
let decodeCommands: [CLICommand] = []
