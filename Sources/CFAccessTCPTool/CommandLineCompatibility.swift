/// cloudflared spellings that ArgumentParser cannot express directly, rewritten before parsing.
enum CommandLineCompatibility {
    /// Flags cloudflared gives to `access` itself (`cloudflared access --fedramp tcp …`). Our
    /// subcommands take them instead, so they move to just after the subcommand's name.
    static let accessFlags: Set<String> = ["--fedramp"]

    /// `access --fedramp tcp …` → `access tcp --fedramp …` (also for `forward`); anything else
    /// is returned unchanged.
    static func rewrite(_ arguments: [String]) -> [String] {
        guard let first = arguments.first, first == "access" || first == "forward" else { return arguments }
        var moved: [String] = []
        var index = 1
        while index < arguments.count, accessFlags.contains(arguments[index]) {
            moved.append(arguments[index])
            index += 1
        }
        // `access --fedramp` alone, or followed by another option: leave it to ArgumentParser's message.
        guard !moved.isEmpty, index < arguments.count, !arguments[index].hasPrefix("-") else { return arguments }
        return [first, arguments[index]] + moved + arguments[(index + 1)...]
    }
}
