import Foundation

/// How the suites with a flat list of figures print them: `--json` one object
/// (`{"suite": name, figure: value, …}`, three decimals), otherwise a title and one line per figure
/// (whole numbers from 100 up), names padded to `nameWidth`.
enum BenchReport {
    static func write(suite: String, title: String, _ figures: [(String, Double)], json: Bool, nameWidth: Int) {
        if json {
            let body = figures.map { "\"\($0.0)\": \(String(format: "%.3f", $0.1))" }.joined(separator: ", ")
            print("{\"suite\": \"\(suite)\", \(body)}")
        } else {
            print(title)
            for (name, value) in figures {
                print("  \(name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)) \(String(format: value >= 100 ? "%.0f" : "%.2f", value))")
            }
        }
        fflush(nil)
    }
}
