/// cloudflared spellings that ArgumentParser cannot express directly, rewritten before parsing.
enum CommandLineCompatibility {
    /// Flags cloudflared gives to `access` itself (`cloudflared access --fedramp tcp …`). Our
    /// subcommands take them instead, so they move to just after the subcommand's name.
    static let accessFlags: Set<String> = ["--fedramp"]

    /// `access --fedramp tcp …` → `access tcp --fedramp …` (also for `forward`); anything else
    /// is returned unchanged.
    static func rewrite(_ arguments: [String]) -> [String] {
        if arguments.first == "shell" {
            ShellCommand.probing = true
            defer { ShellCommand.probing = false }
            return ["shell"] + shellArguments(Array(arguments.dropFirst())) { option in
                // Whether the option takes a value, asked of the shell command's own parser: an
                // option alone fails and with a value parses (a flag parses alone).
                (try? ShellCommand.parse(["host", option])) == nil && (try? ShellCommand.parse(["host", option, "1"])) != nil
            }
        }
        guard let first = arguments.first, first == "access" || first == "forward" else { return arguments }
        // cloudflared's `access help tcp` is ArgumentParser's `help access tcp`.
        if arguments.count > 1, arguments[1] == "help" { return ["help", first] + arguments.dropFirst(2) }
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

    /// `shell`'s arguments read as ssh reads its own: options before the destination and right
    /// after it; the first word after the destination that is not an option starts the remote
    /// command, which takes every word after it as it is (`shell host -p 2222 ls -l /tmp` runs
    /// `ls -l /tmp`). Returned as ArgumentParser reads them: the options, the destination, then
    /// `--` and the command. `takesValue` says whether an option consumes the next word.
    static func shellArguments(_ arguments: [String], takesValue: (String) -> Bool) -> [String] {
        var options: [String] = []
        var destination: String?
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            if word == "--" {
                // `--` ends the options: the destination (if not yet seen), then the command.
                var rest = Array(arguments[(index + 1)...])
                if destination == nil, !rest.isEmpty { destination = rest.removeFirst() }
                return options + (destination.map { [$0] } ?? []) + (rest.isEmpty ? [] : ["--"] + rest)
            }
            if word.hasPrefix("-") && !word.hasPrefix("--") && word.count > 2 && takesValue(String(word.prefix(2))) {
                // An option with its value joined (`-oPermitLocalCommand=no`, as scp passes it):
                // split, since the parser would read `-oKey=value` as an option named `-oKey`.
                options += [String(word.prefix(2)), String(word.dropFirst(2))]
            } else if word.hasPrefix("-") && word.count > 1 {
                options.append(word)
                if takesValue(word), index + 1 < arguments.count {
                    options.append(arguments[index + 1])
                    index += 1
                }
            } else if destination == nil {
                destination = word
            } else {
                return options + [destination!, "--"] + arguments[index...]
            }
            index += 1
        }
        return options + (destination.map { [$0] } ?? [])
    }
}
