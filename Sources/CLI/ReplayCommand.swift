import AppleDecoding
import Configuration
import Domain
import Foundation
import Kafka
import Runtime
import Stages

/// `storeledger replay`: recompute one stage (and every later one) over a range of its input after a
/// fix, and write the difference as compensating ledger entries (issue 13; docs/operations.md,
/// "Replay"). Progress goes to stderr (a bar on a terminal, plain lines otherwise); the report, as
/// JSON, to stdout.
struct ReplayCommand: CLICommand {
    let name = "replay"
    let summary = "Replay a stage over a range of its input after a fix (stopped groups only): recompute through membership, write the difference as compensating ledger entries; --dry-run prints the difference without writing."
    let usage = "--stage decode|dedupe|classify|membership --from TIME|OFFSET [--to TIME|OFFSET] [--users U,...] [--dry-run] [--reverify-receipts] [--group-suffix S] [--bootstrap B] [--database-url URL] [--catalog FILE]   (TIME = 2026-12-01T10:00:00Z or @ms; OFFSET = N, earliest, or 0:N,1:M per partition)"
    let optionNames: Set<String> = ["stage", "from", "to", "users", "group-suffix", "bootstrap", "database-url", "catalog"]
    let flagNames: Set<String> = ["dry-run", "reverify-receipts"]

    func check(_ arguments: Arguments) throws {
        _ = try request(arguments)
    }

    private func request(_ arguments: Arguments) throws -> ReplayRequest {
        guard let stageName = arguments.value("stage") else { throw UsageError("name the stage: --stage decode|dedupe|classify|membership") }
        guard let stage = ReplayStage(rawValue: stageName) else { throw UsageError("unknown stage \(stageName)") }
        guard let fromText = arguments.value("from") else { throw UsageError("--from is required (earliest, an offset or a UTC time)") }
        guard arguments.positionals.isEmpty else { throw UsageError("unexpected argument \(arguments.positionals[0])") }
        do {
            let from = try ReplayBound.parse(fromText)
            let to = try arguments.value("to").map { try ReplayBound.parse($0) }
            if to == .earliest { throw ReplayUsageError("--to earliest replays nothing") }
            var users: Set<String>?
            if let list = arguments.value("users") {
                let names = list.split(separator: ",").map(String.init).filter { !$0.isEmpty }
                guard !names.isEmpty, names.count <= 10_000, names.allSatisfy({ $0.utf8.count <= 256 }) else {
                    throw ReplayUsageError("--users takes 1...10000 comma-separated user ids (or subscription:<key>)")
                }
                // As the read API names them: a UUID user id in any case (R17), StoreLedger's key with
                // its environment in any case; an id as typed would match nothing, silently.
                users = Set(names.map { name in
                    name.hasPrefix("subscription:") ? "subscription:" + SubscriptionKey.normalized(String(name.dropFirst("subscription:".count)))
                        : UserId.normalized(name)
                })
            }
            // Workers started with `--group storeledger-<stage><suffix>`: the replay holds those groups.
            let suffix = arguments.value("group-suffix") ?? ""
            guard suffix.utf8.count <= 64, suffix.utf8.allSatisfy({ $0 < 128 && (isalnum(Int32($0)) != 0 || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")) }) else {
                throw ReplayUsageError("--group-suffix takes up to 64 letters, digits, '-', '_' or '.'")
            }
            return ReplayRequest(stage: stage, from: from, to: to, users: users, dryRun: arguments.has("dry-run"), groupSuffix: suffix)
        } catch {
            throw UsageError(String(describing: error))
        }
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        let request = try request(arguments)
        guard let databaseURL = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        let wrongRules: WrongRules
        do {
            wrongRules = try WrongRules.parse(try Environment.read(arguments, ProcessConfiguration.init).testWrongRules)
        } catch let error as ReplayUsageError {
            throw UsageError("\(Setting.testWrongRule): \(error.description)")
        }
        var decoder: AppleInputDecoder?
        if request.stage == .decode {
            let decoding = try AppleDecodingConfiguration(Environment.read(arguments, DecodingConfiguration.init))
            // verifyReceipt answers with Apple's state today, not when the receipt was uploaded, and a
            // replay would ask it once per receipt ever uploaded: not the same inputs again.
            guard decoding.receiptValidation != .verifyReceipt || arguments.has("reverify-receipts") else {
                throw UsageError("--stage decode re-reads every receipt, and with verifyReceipt validation that asks Apple again "
                                 + "(today's answers): replay from dedupe, or pass --reverify-receipts to ask Apple anyway")
            }
            decoder = try decoding.makeDecoder()
        }
        let engine = ReplayEngine(kafka: try Environment.kafka(arguments, clientId: "storeledger-replay"), databaseURL: databaseURL,
                                  catalog: try loadReplayCatalog(arguments), decoder: decoder, wrongRules: wrongRules)
        let terminal = isatty(STDERR_FILENO) == 1
        var lastLine = ContinuousClock.now - .seconds(10)
        var lastPhase = ""
        let report: ReplayReport
        do {
            report = try engine.run(request) { progress in
                // A bar redrawn in place on a terminal (at most 10 times a second); a plain line every
                // 2 s (and at each phase's end) in a log.
                let now = ContinuousClock.now
                let finished = progress.done >= progress.total
                if terminal {
                    guard now - lastLine >= .milliseconds(100) || finished || progress.phase != lastPhase else { return }
                    FileHandle.standardError.write(Data("\r\(progress.line(bar: 30))\u{1B}[K\(finished ? "\n" : "")".utf8))
                } else {
                    guard now - lastLine >= .seconds(2) || (finished && progress.phase != lastPhase) else { return }
                    FileHandle.standardError.write(Data("replay: \(progress.line(bar: nil))\n".utf8))
                }
                lastLine = now
                lastPhase = finished ? progress.phase : lastPhase
            }
        } catch let refused as ReplayRefused {
            FileHandle.standardError.write(Data("storeledger replay: refused: \(refused.description)\n".utf8))
            return 1
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        FileHandle.standardOutput.write(try encoder.encode(report) + Data("\n".utf8))
        return 0
    }

    private func loadReplayCatalog(_ arguments: Arguments) throws -> Catalog {
        guard let path = Environment.value(arguments, option: "catalog", setting: .catalog) else { return Catalog() }
        guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read catalog \(path)") }
        do { return try Catalog.load(json: [UInt8](data), source: path) } catch { throw UsageError(error.description) }
    }
}
