import Domain
import Foundation
import Ingest
import Runtime

/// `storeledger user show ID`: the support page's timeline in a terminal (docs/support.md).
struct UserCommand: CLICommand {
    let name = "user"
    let summary = "Support: `show ID` prints a user's membership timeline (text lanes: granted, cuts with their cause, grace, billing retry, the change at the renewal) and the ledger as evidence."
    let usage = "show ID [--width N] [--database-url URL]   (or DATABASE_URL)"
    let optionNames: Set<String> = ["width", "database-url"]

    func check(_ arguments: Arguments) throws {
        guard arguments.positionals.first == "show" else { throw UsageError("name an action: show") }
        guard arguments.positionals.count == 2 else { throw UsageError("show takes exactly one user id") }
        if let failure = EventBounds.identifier(arguments.positionals[1], field: "user id") { throw UsageError(failure.reason) }
        let width = try arguments.int("width", default: 72)
        guard (20...400).contains(width) else { throw UsageError("--width must be in 20...400") }
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        let user = arguments.positionals[1]
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        guard let timeline = try SupportReads(databaseURL: url).timeline(user: user, nowMs: now) else {
            FileHandle.standardError.write(Data("storeledger user: nothing is known about user \(TerminalTimeline.safe(user))\n".utf8))
            return 1
        }
        FileHandle.standardOutput.write(Data(TerminalTimeline.render(timeline, width: try arguments.int("width", default: 72)).utf8))
        return 0
    }
}
