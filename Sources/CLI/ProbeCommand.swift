import Foundation
import Runtime
import Simulator

/// `storeledger probe URL`: a container health check without curl in the image. Exit 0 when the
/// URL answers 2xx within the timeout, 1 otherwise.
struct ProbeCommand: CLICommand {
    let name = "probe"
    let summary = "GET an http:// URL (a process's /readyz) and exit 0 on a 2xx answer, 1 otherwise: health checks for containers."
    let usage = "http://HOST:PORT/PATH [--timeout SECONDS]"
    let optionNames: Set<String> = ["timeout"]

    func check(_ arguments: Arguments) throws {
        guard arguments.positionals.count == 1, let url = URL(string: arguments.positionals[0]), url.scheme == "http",
              let host = url.host, !host.isEmpty else {
            throw UsageError("name one http:// URL")
        }
        if let timeout = arguments.value("timeout") {
            guard let seconds = Int(timeout), (1...60).contains(seconds) else { throw UsageError("--timeout must be 1...60 seconds") }
        }
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        let url = URL(string: arguments.positionals[0])!
        let base = "http://\(url.host!):\(url.port ?? 80)"
        let path = url.path.isEmpty ? "/" : url.path
        let timeout = arguments.value("timeout").flatMap { Int($0) } ?? 3
        do {
            let status = try SimpleHTTP.status(base, path, timeoutSeconds: timeout)
            print("\(status) \(url.absoluteString)")
            return (200..<300).contains(status) ? 0 : 1
        } catch {
            print("unreachable \(url.absoluteString): \(error)")
            return 1
        }
    }
}
