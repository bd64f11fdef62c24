import Foundation

/// How the suites with a flat list of figures print them: `--json` one object
/// (`{"suite": name, figure: value, …}`, three decimals), otherwise a title and one line per figure
/// (whole numbers from 100 up), names padded to `nameWidth`. A figure that could not be measured
/// (NaN: no sample, a server that is not ours) is `null` in JSON and "not measured" in text.
enum BenchReport {
    static func write(suite: String, title: String, _ figures: [(String, Double)], json: Bool, nameWidth: Int) {
        if json {
            let body = figures.map { "\"\($0.0)\": \($0.1.isFinite ? String(format: "%.3f", $0.1) : "null")" }.joined(separator: ", ")
            print("{\"suite\": \"\(suite)\", \(body)}")
        } else {
            print(title)
            for (name, value) in figures {
                let text = value.isFinite ? String(format: value >= 100 ? "%.0f" : "%.2f", value) : "not measured"
                print("  \(name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)) \(text)")
            }
        }
        fflush(nil)
    }
}
