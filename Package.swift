// swift-tools-version:6.0
// StoreLedger: App Store receipts and notifications -> Kafka stages -> PostgreSQL membership ledger.
// No outside Swift packages: C libraries come from Debian as system library targets, each
// imported by exactly one adapter module (Kafka, Postgres, Crypto, HTTPServer).
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "StoreLedger",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "storeledger", targets: ["CLI"]),
    ],
    targets: [
        // C libraries (one system library target each).
        .systemLibrary(name: "CRdKafka", path: "Sources/Shared/CRdKafka", pkgConfig: "rdkafka",
                       providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(name: "CLibPQ", path: "Sources/Shared/CLibPQ", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", path: "Sources/Shared/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", path: "Sources/Shared/CMicroHTTPD", pkgConfig: "libmicrohttpd",
                       providers: [.apt(["libmicrohttpd-dev"])]),

        // Adapters: the only modules that import the C targets.
        .target(name: "Kafka", dependencies: ["CRdKafka", "Runtime"], path: "Sources/Shared/Kafka", swiftSettings: strict),
        .target(name: "Postgres", dependencies: ["CLibPQ", "Configuration", "Runtime", "CivilCalendar"], path: "Sources/Shared/Postgres", swiftSettings: strict),
        .target(name: "Crypto", dependencies: ["COpenSSL", "CivilCalendar"], path: "Sources/Shared/Crypto", swiftSettings: strict),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "Runtime"], path: "Sources/Shared/HTTPServer", swiftSettings: strict),

        // Runtime: process plumbing (logs, metrics, services, child processes, admin sockets); not pure.
        // CivilCalendar and Domain: pure code, no I/O.
        // Configuration: the one list of settings and their reader (Foundation only, so every module may use it).
        .target(name: "Configuration", path: "Sources/Shared/Configuration", swiftSettings: strict),
        .target(name: "Runtime", dependencies: ["Configuration"], path: "Sources/Shared/Runtime", swiftSettings: strict),
        .target(name: "CivilCalendar", path: "Sources/Shared/CivilCalendar", swiftSettings: strict),
        .target(name: "Domain", dependencies: ["CivilCalendar"], path: "Sources/Shared/Domain", swiftSettings: strict),
        // Client credentials: API keys (hashed), end-user JWTs, rate limits. Pure apart from OpenSSL's verify.
        .target(name: "Auth", dependencies: ["Configuration", "Crypto"], path: "Sources/Shared/Auth", swiftSettings: strict),
        .target(name: "AppleDecoding", dependencies: ["Configuration", "Domain", "Crypto", "CivilCalendar"], path: "Sources/Shared/AppleDecoding", swiftSettings: strict),
        // The App Store Server API client (outbound HTTP; tokens come from the signer).
        .target(name: "AppStoreServerAPI", dependencies: ["AppleDecoding", "Domain", "Crypto"], path: "Sources/Shared/AppStoreServerAPI",
                swiftSettings: strict),

        // The one owner of the schema, the migrations and every SQL statement: typed reads and writes.
        .target(name: "Store", dependencies: ["Postgres", "Domain", "Runtime", "Crypto"], path: "Sources/Shared/Store", swiftSettings: strict),

        // Deployable roles: the ingest edge, and the workers (Sources/Workers: the stages and the signer).
        .target(name: "Ingest", dependencies: ["CivilCalendar", "Configuration", "Domain", "Runtime", "Kafka", "Postgres", "Store", "HTTPServer", "Auth", "Crypto"],
                path: "Sources/Ingest", swiftSettings: strict),
        .target(name: "Stages", dependencies: ["Configuration", "Domain", "AppleDecoding", "AppStoreServerAPI", "Runtime", "Kafka", "Postgres", "Store", "Crypto"],
                path: "Sources/Workers/Stages", swiftSettings: strict),
        .target(name: "Signer", dependencies: ["Configuration", "Domain", "Runtime", "Kafka", "Crypto"],
                path: "Sources/Workers/Signer", swiftSettings: strict),
        .target(name: "Simulator", dependencies: ["Configuration", "CivilCalendar", "Domain", "AppleDecoding", "Runtime", "Crypto", "HTTPServer"],
                path: "Sources/Tools/Simulator", swiftSettings: strict),
        // One boot sequence for dev, the simulator, the benches and the integration tests (child processes, /readyz).
        .target(name: "LocalStack", dependencies: ["Configuration", "Runtime", "Postgres", "Store", "Kafka", "Domain"], path: "Sources/Tools/LocalStack", swiftSettings: strict),
        // Tools (Sources/Tools): never deployed as a role of their own; the CLI runs them.
        // Bench: `storeledger bench <suite>` (BENCHMARKS.md). Demo: what `storeledger dev --demo` drives.
        .target(name: "Bench", dependencies: ["Configuration", "LocalStack", "Simulator", "Stages", "Signer", "AppleDecoding", "Domain", "Runtime", "Kafka", "Postgres", "Store",
                                              "Crypto", "HTTPServer"],
                path: "Sources/Tools/Bench", swiftSettings: strict),
        .target(name: "Demo", dependencies: ["Configuration", "Simulator", "Domain", "Kafka", "Postgres", "Store"], path: "Sources/Tools/Demo", swiftSettings: strict),
        // The `storeledger` binary: one thin command per role or tool (flags in, a module's function called).
        .executableTarget(name: "CLI",
                          dependencies: ["Configuration", "Ingest", "Auth", "Stages", "Signer", "Simulator", "Bench", "Demo", "AppleDecoding", "Domain",
                                         "Runtime", "Kafka", "Postgres", "Store", "Crypto", "HTTPServer", "AppStoreServerAPI", "LocalStack"],
                          path: "Sources/CLI", swiftSettings: strict),

        // Tests in layers: pure, adapters against the real C libraries, integration against real processes.
        // TestSupport: the generated keys and chains every layer signs with, and the one locator of ../shared.
        .target(name: "TestSupport", dependencies: ["Crypto", "Postgres", "Runtime"], path: "Tests/TestSupport", swiftSettings: strict),
        .testTarget(name: "DomainTests", dependencies: ["TestSupport", "CivilCalendar", "Domain", "AppleDecoding", "Runtime"], path: "Tests/DomainTests", swiftSettings: strict),
        .testTarget(name: "ConfigurationTests", dependencies: ["Configuration"], path: "Tests/ConfigurationTests", swiftSettings: strict),
        .testTarget(name: "AuthTests", dependencies: ["Auth", "Crypto"], path: "Tests/AuthTests", swiftSettings: strict),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka"], path: "Tests/KafkaTests", swiftSettings: strict),
        .testTarget(name: "PostgresTests", dependencies: ["TestSupport", "Postgres"], path: "Tests/PostgresTests", swiftSettings: strict),
        .testTarget(name: "StoreTests", dependencies: ["TestSupport", "Store", "Postgres", "Domain", "Kafka", "Stages", "AppStoreServerAPI", "Runtime", "HTTPServer"], path: "Tests/StoreTests", swiftSettings: strict),
        .testTarget(name: "CryptoTests", dependencies: ["TestSupport", "Crypto"], path: "Tests/CryptoTests", swiftSettings: strict),
        .testTarget(name: "SupportTests", dependencies: ["TestSupport", "Ingest", "Store", "Auth", "Crypto", "Domain", "Kafka", "HTTPServer"], path: "Tests/SupportTests", swiftSettings: strict),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "Runtime"], path: "Tests/HTTPServerTests", swiftSettings: strict),
        .testTarget(name: "DecodingTests", dependencies: ["TestSupport", "Configuration", "Simulator", "AppleDecoding", "Domain", "Crypto", "Runtime"],
                    path: "Tests/DecodingTests", swiftSettings: strict),
        .testTarget(name: "SignerTests", dependencies: ["TestSupport", "Signer", "Crypto", "Domain", "Runtime"],
                    path: "Tests/SignerTests", swiftSettings: strict),
        .testTarget(name: "SimulatorTests", dependencies: ["TestSupport", "Simulator", "AppleDecoding", "Domain", "Crypto", "HTTPServer"],
                    path: "Tests/SimulatorTests", swiftSettings: strict),
        .testTarget(name: "ServerAPITests", dependencies: ["Configuration", "AppStoreServerAPI", "Simulator", "Signer", "Stages", "AppleDecoding", "Domain", "Kafka", "Runtime",
                                                          "Crypto", "Store", "Postgres"],
                    path: "Tests/ServerAPITests", swiftSettings: strict),
        .testTarget(name: "IntegrationTests", dependencies: ["TestSupport", "Configuration", "Auth", "Domain", "Runtime", "Postgres", "Kafka", "Crypto", "Simulator", "AppleDecoding",
                                                            "Signer", "AppStoreServerAPI", "HTTPServer", "LocalStack", "Store"],
                    path: "Tests/IntegrationTests", swiftSettings: strict),
    ]
)

// Fuzz targets (scripts/fuzz.sh builds them with -sanitize=fuzzer,address and -DSTORELEDGER_FUZZING;
// a plain build makes replay tools that run saved inputs through the same entry point). Each is its
// `fuzzOne`; FuzzDriver is the `main` they share (libFuzzer's driver, or the replay of saved inputs)
// and the decoders' fuzzing configuration.
package.targets.append(.target(name: "FuzzDriver", dependencies: ["Configuration", "AppleDecoding"], path: "Sources/Fuzz/FuzzDriver", swiftSettings: strict))
package.targets += ["FuzzReceipt", "FuzzJWS", "FuzzNotification", "FuzzPipeline"].map { name in
    .executableTarget(name: name, dependencies: ["FuzzDriver", "Configuration", "AppleDecoding", "Crypto", "Domain"], path: "Sources/Fuzz/\(name)",
                      swiftSettings: strict)
}
