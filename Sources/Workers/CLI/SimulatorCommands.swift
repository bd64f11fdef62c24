/// `simulate` (issue 5).
let simulatorCommands: [CLICommand] = []
