import Configuration
import Foundation
import XCTest

/// docker-compose.yml, deploy/Dockerfile and the files they mount cannot be run here (no Docker
/// engine), so they are checked statically against the code: every command is one the binary
/// accepts, every variable is read and documented, every port, metric and topic exists.
final class DeployChecksTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private func text(_ path: String) throws -> String {
        try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
    }

    /// YAML through Debian's python3-yaml (scripts/install-deps.sh installs it), as JSON.
    private func yaml(_ path: String) throws -> [String: Any] {
        let script = "import sys, json, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)"
        let (status, output) = try run("/usr/bin/python3", ["-c", script, Self.root.appendingPathComponent(path).path])
        XCTAssertEqual(status, 0, "python3 with yaml (Debian python3-yaml) could not parse \(path): \(output)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any], "\(path) is a YAML mapping")
    }

    private func run(_ executable: String, _ arguments: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    private func checkArguments(_ argv: [String], _ context: String) throws {
        let (status, output) = try run(try Cluster.binary(), argv + ["--check-arguments"])
        XCTAssertEqual(status, 0, "\(context): storeledger \(argv.joined(separator: " ")) is not a valid command line: \(output)")
    }

    private var services: [String: [String: Any]] {
        get throws { try XCTUnwrap(try yaml("docker-compose.yml")["services"] as? [String: [String: Any]]) }
    }

    /// Services built from our image (the others are Kafka, PostgreSQL, Prometheus, Grafana).
    private var ourServices: [(String, [String: Any])] {
        get throws { try services.filter { $0.value["build"] != nil }.sorted { $0.key < $1.key } }
    }

    private var codeText: String {
        get throws {
            var all = ""
            let sources = Self.root.appendingPathComponent("Sources")
            for case let path as String in FileManager.default.enumerator(atPath: sources.path)! where path.hasSuffix(".swift") {
                all += try String(contentsOf: sources.appendingPathComponent(path), encoding: .utf8)
            }
            return all
        }
    }

    func testEveryServiceCommandAndHealthCheckIsAValidStoreledgerCommandLine() throws {
        let ours = try ourServices
        XCTAssertEqual(Set(ours.map(\.0)), ["setup", "ingest", "decode", "dedupe", "classify", "membership", "relay", "signer"])
        for (name, service) in ours {
            if let command = service["command"] as? [String] {
                try checkArguments(command, "service \(name)")
            } else {
                // The setup job chains commands in a shell: each link must be a storeledger command.
                let entry = try XCTUnwrap(service["entrypoint"] as? [String], "\(name) has a command or an entrypoint")
                XCTAssertEqual(Array(entry.prefix(2)), ["/bin/sh", "-c"])
                for link in entry[2].components(separatedBy: "&&") {
                    let words = link.split(separator: " ").map(String.init)
                    XCTAssertEqual(words.first, "storeledger", "\(name): \(link)")
                    try checkArguments(Array(words.dropFirst()), "service \(name)")
                }
            }
            guard name != "setup" else { continue }
            let health = try XCTUnwrap((service["healthcheck"] as? [String: Any])?["test"] as? [String], "\(name) has a health check")
            XCTAssertEqual(Array(health.prefix(3)), ["CMD", "storeledger", "probe"], name)
            try checkArguments(Array(health.dropFirst(2)), "health check of \(name)")
            XCTAssertEqual(service["restart"] as? String, "unless-stopped", "\(name) restarts")
            // The probe asks the port the service listens on.
            let command = try XCTUnwrap(service["command"] as? [String])
            let portFlag = command.contains("--admin-port") ? "--admin-port" : "--port"
            let port = try XCTUnwrap(command.firstIndex(of: portFlag).map { command[$0 + 1] }, "\(name) names its port")
            XCTAssert(health[3].hasPrefix("http://127.0.0.1:\(port)/readyz"), "\(name) probes its own port \(port): \(health[3])")
        }
    }

    func testEveryVariableSetIsReadByTheCodeAndDocumented() throws {
        let documentation = try text("docs/configuration.md")
        var names = Set<String>()
        for (name, service) in try ourServices {
            if let environment = service["environment"] as? [String: Any] { names.formUnion(environment.keys) }
            for file in service["env_file"] as? [String] ?? [] {
                // The env files hold secrets and are not in the repository; their examples are.
                let example = try text(file + ".example")
                for line in example.split(separator: "\n") where !line.hasPrefix("#") {
                    guard let key = line.split(separator: "=", maxSplits: 1).first else { continue }
                    names.insert(String(key))
                }
                XCTAssert(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(file + ".example").path), "\(name): \(file).example")
            }
        }
        XCTAssertGreaterThan(names.count, 8)
        for name in names.sorted() {
            XCTAssertNotNil(Setting.named(name), "\(name) is set in deploy files but is no setting of Setting.all")
            XCTAssert(documentation.contains("`\(name)`"), "\(name) is set in deploy files but docs/configuration.md does not document it")
        }
    }

    func testTheSignerAloneSeesTheKeys() throws {
        for (name, service) in try ourServices {
            let volumes = (service["volumes"] as? [String] ?? []).joined(separator: " ")
            let envFiles = service["env_file"] as? [String] ?? []
            if name == "signer" {
                XCTAssert(volumes.contains("/etc/storeledger/keys"))
                XCTAssertEqual(envFiles, ["deploy/signer.env"])
            } else {
                XCTAssertFalse(volumes.contains("keys"), "\(name) mounts the keys")
                XCTAssertFalse(envFiles.contains("deploy/signer.env"), "\(name) reads the signer's configuration")
            }
        }
        let ignored = try text(".gitignore")
        for secret in ["/deploy/storeledger.env", "/deploy/signer.env", "/deploy/keys/"] {
            XCTAssert(ignored.contains(secret), "\(secret) is never committed")
        }
    }

    func testEveryDocumentedVariableIsReadAndEveryVariableReadIsDocumented() throws {
        let documentation = try text("docs/configuration.md")
        // Code reads variables only through Setting.all (ConfigurationSourceTests keeps it so);
        // `STORELEDGER_FUZZING` is a compile flag, no variable.
        let pattern = try NSRegularExpression(pattern: "(STORELEDGER_[A-Z0-9_]*[A-Z0-9])")
        let documented = Set(pattern.matches(in: documentation, range: NSRange(documentation.startIndex..., in: documentation))
            .map { String(documentation[Range($0.range(at: 1), in: documentation)!]) })
        let read = Set(Setting.all.map(\.name).filter { $0.hasPrefix("STORELEDGER_") })
        XCTAssertGreaterThan(read.count, 20)
        for name in documented.subtracting(read).sorted() { XCTFail("docs/configuration.md documents \(name), which no code reads") }
        for name in read.subtracting(documented).sorted() { XCTFail("the code reads \(name), which docs/configuration.md does not document") }
    }

    func testPrometheusScrapesThePortsTheServicesServe() throws {
        let config = try yaml("deploy/prometheus.yml")
        let jobs = try XCTUnwrap(config["scrape_configs"] as? [[String: Any]])
        var scraped: [String: Int] = [:]
        for job in jobs {
            for sd in job["dns_sd_configs"] as? [[String: Any]] ?? [] {
                for name in sd["names"] as? [String] ?? [] { scraped[name] = sd["port"] as? Int }
            }
        }
        for (name, service) in try ourServices where name != "setup" {
            let command = try XCTUnwrap(service["command"] as? [String])
            let portFlag = command.contains("--admin-port") ? "--admin-port" : "--port"
            let port = command.firstIndex(of: portFlag).map { Int(command[$0 + 1]) } ?? nil
            XCTAssertEqual(scraped[name], port, "Prometheus scrapes \(name) where it serves /metrics")
            if portFlag == "--admin-port" {
                XCTAssertEqual(command.firstIndex(of: "--admin-host").map { command[$0 + 1] }, "0.0.0.0", "\(name)'s admin port is reachable from Prometheus")
            }
        }
        let ingestPorts = try XCTUnwrap(try services["ingest"]?["ports"] as? [String])
        XCTAssertEqual(ingestPorts, ["8080:8080"])
    }

    func testTheDashboardUsesOnlyMetricsTheCodeExports() throws {
        let code = try codeText
        let dashboard = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text("deploy/grafana/dashboards/storeledger.json").utf8)) as? [String: Any])
        let panels = try XCTUnwrap(dashboard["panels"] as? [[String: Any]])
        let metric = try NSRegularExpression(pattern: "storeledger_[a-z_]+")
        var used = Set<String>()
        for panel in panels {
            XCTAssertEqual((panel["datasource"] as? [String: Any])?["uid"] as? String, "storeledger-prometheus")
            for target in panel["targets"] as? [[String: Any]] ?? [] {
                let expr = try XCTUnwrap(target["expr"] as? String)
                for match in metric.matches(in: expr, range: NSRange(expr.startIndex..., in: expr)) {
                    used.insert(String(expr[Range(match.range, in: expr)!]))
                }
            }
        }
        XCTAssertGreaterThan(used.count, 8)
        for name in used.sorted() {
            // A histogram is exported under its base name; Prometheus adds _bucket, _sum and _count.
            let base = name.replacingOccurrences(of: "_(bucket|sum|count)$", with: "", options: .regularExpression)
            XCTAssert(code.contains("\"\(name)") || code.contains("\"\(base)\""), "the dashboard charts \(name), which no process exports")
        }
        XCTAssert(try text("deploy/grafana/provisioning/datasources/prometheus.yml").contains("uid: storeledger-prometheus"))
    }

    func testEveryTopicNamedInDocsAndDeployFilesExists() throws {
        let topics = try text("Sources/Shared/Domain/Events/Topics.swift")
        let pattern = try NSRegularExpression(pattern: "(?<![/\\w])storeledger\\.[a-z]+\\.[a-z.]*[a-z]")
        var files = ["docker-compose.yml", "README.md"]
        for folder in ["docs", "deploy"] {
            for case let path as String in FileManager.default.enumerator(atPath: Self.root.appendingPathComponent(folder).path)!
            where path.hasSuffix(".md") || path.hasSuffix(".yml") || path.hasSuffix(".example") {
                files.append(folder + "/" + path)
            }
        }
        var checked = 0
        for file in files {
            let content = try text(file)
            for match in pattern.matches(in: content, range: NSRange(content.startIndex..., in: content)) {
                let name = String(content[Range(match.range, in: content)!])
                // Kafka header names share the prefix (storeledger.received-at, storeledger.source).
                guard !name.hasPrefix("storeledger.received"), !name.hasPrefix("storeledger.source") else { continue }
                checked += 1
                XCTAssert(topics.contains("\"\(name)\""), "\(file) names topic \(name), which Topics.swift does not define")
            }
        }
        XCTAssertGreaterThan(checked, 5)
    }

    func testTheImageIsMultiStageNonRootWithRuntimeLibrariesOnly() throws {
        let dockerfile = try text("deploy/Dockerfile")
        let stages = Array(dockerfile.components(separatedBy: "\nFROM ").dropFirst())
        XCTAssertEqual(stages.count, 2, "one build stage, one runtime stage")
        let runtime = try XCTUnwrap(stages.last)
        XCTAssertFalse(runtime.contains("-dev"), "no development packages at runtime")
        XCTAssertFalse(runtime.hasPrefix("swift:"), "the runtime stage carries no toolchain")
        // libcurl4: FoundationNetworking's static library still links libcurl.so.4 dynamically.
        for library in ["librdkafka1", "libpq5", "libssl3", "libmicrohttpd12", "libcurl4"] { XCTAssert(runtime.contains(library), library) }
        let user = try XCTUnwrap(runtime.split(separator: "\n").last { $0.hasPrefix("USER ") })
        XCTAssertFalse(user.contains("root") || user.hasSuffix(" 0") || user.contains(" 0:"), "runs as a non-root user: \(user)")
        XCTAssert(runtime.contains("COPY --from=build /storeledger /usr/local/bin/storeledger"))
        XCTAssert(stages[0].contains("--static-swift-stdlib"), "the Swift runtime is linked in")
    }
}
