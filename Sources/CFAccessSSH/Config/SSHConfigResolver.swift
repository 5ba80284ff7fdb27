import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// OpenSSH's `StrictHostKeyChecking` as written in ssh_config.
public enum SSHStrictHostKeyChecking: Sendable, Equatable {
    /// `yes`: an unknown key is refused.
    case yes
    /// `accept-new`: an unknown key is added; a changed one is refused.
    case acceptNew
    /// `no` / `off`: OpenSSH adds unknown keys and lets some changed ones through.
    case no
    /// `ask` (OpenSSH's default): the person is asked about an unknown key.
    case ask
}

extension SSHHostKeyChecking {
    /// The checking for ssh_config's `StrictHostKeyChecking`. `no` adds unknown keys like
    /// `accept-new`, but a changed key is still refused: this client never connects to a host
    /// whose key changed.
    public init(_ setting: SSHStrictHostKeyChecking) {
        switch setting {
        case .yes: self = .strict
        case .acceptNew, .no: self = .acceptNew
        case .ask: self = .ask
        }
    }
}

/// OpenSSH's `RequestTTY`: whether the session gets a pseudo-terminal.
public enum SSHRequestTTY: Sendable, Equatable {
    /// `no` (ssh's `-T`).
    case no
    /// `yes` (ssh's `-t`): when the local side is a terminal.
    case yes
    /// `force` (ssh's `-tt`): even when the local side is not a terminal.
    case force
    /// `auto`: for a login shell, not for a command.
    case auto
}

/// What ssh_config says for one host, after OpenSSH's rules: the first value found for a
/// keyword wins (`IdentityFile`, `CertificateFile` and `SendEnv` add up), tokens (`%h`, `%r`, `~`,
/// `${VAR}`) are expanded. nil (or empty) means the file did not say.
public struct SSHHostConfig: Sendable, Equatable {
    /// The host as given: what `Host` patterns are matched against (as written, so `Host work`
    /// does not match `WORK`, as in OpenSSH), `%n`.
    public var host: String
    /// `HostName` (its `%h` expanded), else ``host``, lower-cased: the name to connect to — for
    /// an Access tunnel, the Access hostname.
    public var hostName: String
    /// The user: the one given to ``SSHConfigResolver/resolve(host:user:port:)``, else `User`.
    public var user: String?
    /// The port: the one given, else `Port`.
    public var port: Int?
    /// `IdentityFile`s, in order, expanded.
    public var identityFiles: [String] = []
    /// `CertificateFile`s, in order, expanded.
    public var certificateFiles: [String] = []
    /// `IdentitiesOnly`.
    public var identitiesOnly: Bool?
    /// `ServerAliveInterval` (zero: off).
    public var serverAliveInterval: Duration?
    /// `ServerAliveCountMax`.
    public var serverAliveCountMax: Int?
    /// `ConnectTimeout`.
    public var connectTimeout: Duration?
    /// `StrictHostKeyChecking`.
    public var strictHostKeyChecking: SSHStrictHostKeyChecking?
    /// `UserKnownHostsFile`, expanded (empty for `none`).
    public var userKnownHostsFiles: [String]?
    /// `GlobalKnownHostsFile`, expanded (empty for `none`).
    public var globalKnownHostsFiles: [String]?
    /// `SendEnv` patterns (`LANG`, `LC_*`), after any `-PATTERN` removals.
    public var sendEnv: [String] = []
    /// `SetEnv` variables.
    public var setEnv: [String: String] = [:]
    /// `RequestTTY`.
    public var requestTTY: SSHRequestTTY?
    /// `LogLevel`, upper-cased (`QUIET`, `ERROR`, `INFO`, …).
    public var logLevel: String?
    /// `BatchMode`: never ask a person anything (passphrases, passwords, host keys).
    public var batchMode: Bool?
    /// `PubkeyAuthentication` (`unbound` and `host-bound` count as yes).
    public var pubkeyAuthentication: Bool?
    /// `PasswordAuthentication`.
    public var passwordAuthentication: Bool?
    /// `KbdInteractiveAuthentication` (or its old name `ChallengeResponseAuthentication`).
    public var keyboardInteractiveAuthentication: Bool?
    /// `PreferredAuthentications`, the method names in order.
    public var preferredAuthentications: [String]?
    /// `RemoteCommand`: the command to run when the command line gives none.
    public var remoteCommand: String?
    /// `HashKnownHosts`: new known_hosts entries are written with hashed names (`|1|…`).
    public var hashKnownHosts: Bool?
    /// `HostKeyAlias`: the name known_hosts uses for the host instead of its own.
    public var hostKeyAlias: String?
    /// `EscapeChar`: the escape character, or `none` (nil: not set).
    public var escapeChar: String?
    /// `LocalForward` lines (every one that applies), read as `-L` reads its value.
    public var localForwards: [SSHLocalForward] = []
    /// `DynamicForward` lines (every one that applies), read as `-D` reads its value.
    public var dynamicForwards: [SSHLocalForward] = []
    /// `RemoteForward` lines (every one that applies), read as `-R` reads its value.
    public var remoteForwards: [SSHRemoteForward] = []
    /// `ExitOnForwardFailure`: a forward that cannot be set up ends the session.
    public var exitOnForwardFailure: Bool?
    /// `ForwardAgent`: `yes`, `no`, or the agent socket to forward (a path, or `$NAME` for the
    /// variable holding one) in ``forwardAgentSocket``.
    public var forwardAgent: Bool?
    /// The agent socket `ForwardAgent` names, as written: a path (`~` for the home directory)
    /// or `$NAME`, the variable holding one; nil for `yes` (`SSH_AUTH_SOCK`'s socket).
    public var forwardAgentSocket: String?
    /// `Compression`.
    public var compression: Bool?
    /// `ClearAllForwardings`: no `-L` or `LocalForward` (what scp and sftp pass).
    public var clearAllForwardings: Bool?
    /// `ProxyJump`: `[user@]host[:port]` of the host to go through (empty for `none`).
    public var proxyJump: String?
    /// `Match` blocks that were skipped (`path:line`): they are not supported, and their lines
    /// apply to no host.
    public var skippedMatchBlocks: [String] = []

    /// Settings for `host` with nothing set.
    public init(host: String) {
        self.host = host
        hostName = host.lowercased()
    }

    /// The variables to send for a session: those of `local` whose names match a `SendEnv`
    /// pattern, then the `SetEnv` ones (which win).
    public func environment(sending local: [String: String]) -> [String: String] {
        var chosen: [String: String] = [:]
        for (name, value) in local where sendEnv.contains(where: { SSHPattern.matches(name, pattern: $0) }) {
            chosen[name] = value
        }
        chosen.merge(setEnv) { _, set in set }
        return chosen
    }

    /// Whether `LogLevel` asks for silence up to errors (`QUIET`, `FATAL`, `ERROR`), as `-q` does:
    /// ssh's informational lines ("Connection to … closed.") are then not shown.
    public var isQuiet: Bool {
        guard let logLevel else { return false }
        return ["QUIET", "FATAL", "ERROR"].contains(logLevel)
    }
}

/// What tokens and `~` expand to: the local side of ssh_config's `%d`, `%u`, `%i`, `%l`, `%L`
/// and `${VAR}`.
public struct SSHConfigContext: Sendable {
    /// The local user's home directory (`~`, `%d`).
    public var homeDirectory: String
    /// The local user name (`%u`, and `%r` when no user is given).
    public var localUser: String
    /// The local user id (`%i`).
    public var userID: UInt32
    /// The local host name (`%l`; `%L` is its first label).
    public var localHostName: String
    /// The environment (`${VAR}`).
    public var environment: [String: String]
    /// The home directory of another user (`~name/`), nil if there is no such user.
    public var homeOfUser: @Sendable (String) -> String?

    /// A context with every value given.
    public init(homeDirectory: String, localUser: String, userID: UInt32, localHostName: String,
                environment: [String: String], homeOfUser: @escaping @Sendable (String) -> String? = { _ in nil }) {
        self.homeDirectory = homeDirectory
        self.localUser = localUser
        self.userID = userID
        self.localHostName = localHostName
        self.environment = environment
        self.homeOfUser = homeOfUser
    }

    /// This process's context: `HOME` of `environment` (else the password database's), `USER`
    /// (else the database's name), the real user id, the host name.
    public static func current(environment: [String: String]) -> SSHConfigContext {
        var name = [CChar](repeating: 0, count: 256)
        let host = gethostname(&name, name.count - 1) == 0
            ? name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } : "localhost"
        let user = environment["USER"].flatMap { $0.isEmpty ? nil : $0 }
            ?? getpwuid(getuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "unknown"
        return SSHConfigContext(homeDirectory: CFAccessSSH.homeDirectory(environment: environment), localUser: user,
                                userID: UInt32(getuid()), localHostName: host, environment: environment) { other in
            getpwnam(other).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } }
        }
    }
}

/// Applies ssh_config files to a host as OpenSSH does: the files in order (the `-o` options,
/// then the user's file, then the system's), `Host` blocks by their patterns (`*`, `?`, `!`),
/// the first value of a keyword winning, `Include` read where it stands. `Match` blocks are not
/// supported: they are skipped (and listed in ``SSHHostConfig/skippedMatchBlocks``). A keyword
/// OpenSSH knows but this client does not use is ignored; a word OpenSSH does not know, or a bad
/// value for a keyword used here, is an ``SSHConfigError`` naming the file and line.
public struct SSHConfigResolver: Sendable {
    /// The files, in the order they are read.
    public var files: [SSHConfigFile]
    /// What tokens expand to.
    public var context: SSHConfigContext
    /// Reads the files an `Include` pattern (an absolute path with wildcards) names.
    public var includes: @Sendable (_ pattern: String, _ kind: SSHConfigFile.Kind) throws(SSHConfigError) -> [SSHConfigFile]

    /// A resolver over `files`; `Include`s read from disk unless `includes` says otherwise.
    public init(files: [SSHConfigFile], context: SSHConfigContext,
                includes: @escaping @Sendable (String, SSHConfigFile.Kind) throws(SSHConfigError) -> [SSHConfigFile]
                    = { pattern, kind throws(SSHConfigError) in try SSHConfigFile.loadIncluded(pattern: pattern, kind: kind) }) {
        self.files = files
        self.context = context
        self.includes = includes
    }

    /// OpenSSH's files for this process: `options` (ssh's `-o`) first; then `configFile` alone
    /// when given (ssh's `-F`; `none` for no file), else `~/.ssh/config` (checked like OpenSSH:
    /// yours, not writable by others) and `/etc/ssh/ssh_config` (``SSHConfigFile/debianDefaults``
    /// where there is none).
    public static func standard(configFile: String?, options: [String], environment: [String: String]) throws(SSHConfigError)
        -> SSHConfigResolver {
        var files = [try SSHConfigFile(commandLineOptions: options)]
        let context = SSHConfigContext.current(environment: environment)
        if let configFile {
            if configFile != "none" {
                let path = expandTilde(configFile, context: context) ?? configFile
                guard let file = try SSHConfigFile.load(path: path, kind: .user, checkPermissions: false) else {
                    throw SSHConfigError(source: configFile, line: 0, reason: "no such file (give an ssh_config file, or -F none)")
                }
                files.append(file)
            }
        } else {
            if let user = try SSHConfigFile.load(path: SSHConfigFile.userPath(environment: environment), kind: .user,
                                                 checkPermissions: true) {
                files.append(user)
            }
            files.append(try SSHConfigFile.load(path: SSHConfigFile.systemPath, kind: .system, checkPermissions: false)
                         ?? SSHConfigFile.debianDefaults)
        }
        return SSHConfigResolver(files: files, context: context)
    }

    /// The settings for `host` (as given on the command line). `user` and `port`, when given
    /// (`user@host`, `-l`, `-p`), win over the files' `User` and `Port`.
    public func resolve(host: String, user: String? = nil, port: Int? = nil) throws(SSHConfigError) -> SSHHostConfig {
        var state = Resolution(host: host)
        for file in files {
            var active = true
            try apply(file, state: &state, active: &active, neverMatch: false, depth: 0)
        }
        return try state.finish(user: user, port: port, context: context)
    }

    private func apply(_ file: SSHConfigFile, state: inout Resolution, active: inout Bool, neverMatch: Bool,
                       depth: Int) throws(SSHConfigError) {
        for line in file.lines {
            let at = Location(source: line.source ?? file.path, line: line.number)
            switch line.name {
            case "host":
                active = !neverMatch && Self.hostMatches(state.host, patterns: line.arguments)
            case "match":
                let all = line.arguments.map { $0.lowercased() }
                if all == ["all"] {
                    active = !neverMatch
                } else {
                    active = false
                    state.config.skippedMatchBlocks.append("\(file.path):\(line.number)")
                }
            case "include":
                guard depth < 16 else { throw at.error("Include nested too deeply (16 levels): is a file including itself?") }
                let wasActive = active
                for argument in line.arguments {
                    guard var path = Self.expandTilde(argument, context: context) else {
                        throw at.error("Include \(argument): no such user's home directory")
                    }
                    if !path.hasPrefix("/") {
                        path = (file.kind == .user ? context.homeDirectory + "/.ssh/" : "/etc/ssh/") + path
                    }
                    for included in try includes(path, file.kind) {
                        try apply(included, state: &state, active: &active, neverMatch: neverMatch || !wasActive,
                                  depth: depth + 1)
                        active = wasActive
                    }
                }
            default:
                try state.option(line, active: active, at: at)
            }
        }
    }

    /// Whether `host` matches a `Host` line: some pattern matches and no negated one does.
    static func hostMatches(_ host: String, patterns: [String]) -> Bool {
        var matched = false
        for pattern in patterns {
            if pattern.hasPrefix("!") {
                if SSHPattern.matches(host, pattern: String(pattern.dropFirst())) { return false }
            } else if SSHPattern.matches(host, pattern: pattern) {
                matched = true
            }
        }
        return matched
    }

    /// `~` and `~/…` (the home directory), `~name/…` (that user's); nil for an unknown user.
    static func expandTilde(_ path: String, context: SSHConfigContext) -> String? {
        guard path.hasPrefix("~") else { return path }
        let slash = path.firstIndex(of: "/") ?? path.endIndex
        let name = String(path[path.index(after: path.startIndex)..<slash])
        let home = name.isEmpty ? context.homeDirectory : context.homeOfUser(name)
        guard let home else { return nil }
        return home + path[slash...]
    }
}

/// A file and line, for messages.
struct Location: Sendable, Equatable {
    let source: String
    let line: Int

    func error(_ reason: String) -> SSHConfigError {
        SSHConfigError(source: source, line: line, reason: reason)
    }
}

/// A value and where it was written.
struct Located: Sendable {
    let value: String
    let at: Location
}

/// The first values found so far, while the files are read.
private struct Resolution {
    let host: String
    var config: SSHHostConfig
    var hostName: Located?
    var user: String?
    var port: Int?
    var identityFiles: [Located] = []
    var certificateFiles: [Located] = []
    var knownHostsFiles: [Located]?
    var globalKnownHostsFiles: [Located]?
    var setEnvSeen = false
    var ignoreUnknown: String?

    init(host: String) {
        self.host = host
        config = SSHHostConfig(host: host)
    }

    /// One keyword line: its value checked (in every block, as ssh checks them), and kept when
    /// the block applies and nothing was set before.
    mutating func option(_ line: SSHConfigFile.Line, active: Bool, at: Location) throws(SSHConfigError) {
        let arguments = line.arguments
        func single() throws(SSHConfigError) -> String {
            guard arguments.count == 1 else {
                throw at.error("\(line.keyword) takes one value, not \(arguments.count) (quote a value that holds spaces)")
            }
            return arguments[0]
        }
        switch line.name {
        case "hostname":
            let value = try single()
            if active && hostName == nil { hostName = Located(value: value, at: at) }
        case "user":
            let value = try single()
            if active && user == nil { user = value }
        case "port":
            let value = try single()
            guard let number = Int(value), (1...65535).contains(number) else {
                throw at.error("Port \(value) is not a port number (1 to 65535)")
            }
            if active && port == nil { port = number }
        case "identityfile", "identityfile2":
            let value = try single()
            if active { identityFiles.append(Located(value: value, at: at)) }
        case "certificatefile":
            let value = try single()
            if active { certificateFiles.append(Located(value: value, at: at)) }
        case "identitiesonly":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.identitiesOnly == nil { config.identitiesOnly = value }
        case "serveraliveinterval":
            let value = try Self.time(try single(), keyword: line.keyword, at: at)
            if active && config.serverAliveInterval == nil { config.serverAliveInterval = value }
        case "serveralivecountmax":
            let value = try single()
            guard let number = Int(value), number >= 0 else {
                throw at.error("ServerAliveCountMax \(value) is not a number of keepalives (0 or more)")
            }
            if active && config.serverAliveCountMax == nil { config.serverAliveCountMax = number }
        case "connecttimeout":
            let value = try Self.time(try single(), keyword: line.keyword, at: at)
            if active && config.connectTimeout == nil { config.connectTimeout = value }
        case "stricthostkeychecking":
            let value: SSHStrictHostKeyChecking
            switch try single().lowercased() {
            case "yes", "true": value = .yes
            case "no", "false", "off": value = .no
            case "ask": value = .ask
            case "accept-new": value = .acceptNew
            case let other:
                throw at.error("StrictHostKeyChecking \(other) is not one of yes, accept-new, no, off, ask")
            }
            if active && config.strictHostKeyChecking == nil { config.strictHostKeyChecking = value }
        case "userknownhostsfile":
            if active && knownHostsFiles == nil { knownHostsFiles = arguments.map { Located(value: $0, at: at) } }
        case "globalknownhostsfile":
            if active && globalKnownHostsFiles == nil { globalKnownHostsFiles = arguments.map { Located(value: $0, at: at) } }
        case "sendenv":
            for pattern in arguments {
                if pattern.hasPrefix("-") {
                    let removed = String(pattern.dropFirst())
                    if active { config.sendEnv.removeAll { SSHPattern.matches($0, pattern: removed) } }
                } else {
                    guard !pattern.contains("=") else {
                        throw at.error("SendEnv \(pattern): a variable name (or pattern) has no '='; SetEnv sets values")
                    }
                    if active && !config.sendEnv.contains(pattern) { config.sendEnv.append(pattern) }
                }
            }
        case "setenv":
            // As in OpenSSH 9, the first SetEnv line that applies is the one used.
            var variables: [String: String] = [:]
            for pair in arguments {
                guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
                    throw at.error("SetEnv \(pair) is not NAME=VALUE")
                }
                let name = String(pair[..<equals])
                if variables[name] == nil { variables[name] = String(pair[pair.index(after: equals)...]) }
            }
            if active && !setEnvSeen {
                setEnvSeen = true
                config.setEnv = variables
            }
        case "requesttty":
            let value: SSHRequestTTY
            switch try single().lowercased() {
            case "no", "false": value = .no
            case "yes", "true": value = .yes
            case "force": value = .force
            case "auto": value = .auto
            case let other: throw at.error("RequestTTY \(other) is not one of no, yes, force, auto")
            }
            if active && config.requestTTY == nil { config.requestTTY = value }
        case "loglevel":
            let value = try single().uppercased()
            let levels = ["QUIET", "FATAL", "ERROR", "INFO", "VERBOSE", "DEBUG", "DEBUG1", "DEBUG2", "DEBUG3"]
            guard levels.contains(value) else {
                throw at.error("LogLevel \(value) is not one of \(levels.joined(separator: ", "))")
            }
            if active && config.logLevel == nil { config.logLevel = value }
        case "ignoreunknown":
            let value = try single()
            if active && ignoreUnknown == nil { ignoreUnknown = value }
        case "dynamicforward":
            let value = try single()
            guard let forward = try? SSHLocalForward(parsingDynamic: value) else {
                throw at.error("DynamicForward \(value) is not [bind_address:]port")
            }
            if active { config.dynamicForwards.append(forward) }
        case "localforward":
            guard arguments.count == 2 else {
                throw at.error("LocalForward takes [bind_address:]port and host:hostport")
            }
            guard let forward = try? SSHLocalForward(parsing: arguments[0] + ":" + arguments[1]) else {
                throw at.error("LocalForward \(arguments.joined(separator: " ")) is not [bind_address:]port host:hostport")
            }
            if active { config.localForwards.append(forward) }
        case "remoteforward":
            guard arguments.count == 2 else {
                throw at.error("RemoteForward takes [bind_address:]port and host:hostport (a remote SOCKS proxy is not supported)")
            }
            guard let forward = try? SSHRemoteForward(parsing: arguments[0] + ":" + arguments[1]) else {
                throw at.error("RemoteForward \(arguments.joined(separator: " ")) is not [bind_address:]port host:hostport")
            }
            if active { config.remoteForwards.append(forward) }
        case "exitonforwardfailure":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.exitOnForwardFailure == nil { config.exitOnForwardFailure = value }
        case "forwardagent":
            let text = try single()
            var socket: String?
            let value: Bool
            if text.hasPrefix("/") || text.hasPrefix("~") || text.hasPrefix("$") {
                value = true
                socket = text
            } else {
                value = try Self.flag(text, keyword: line.keyword, at: at)
            }
            if active && config.forwardAgent == nil {
                config.forwardAgent = value
                config.forwardAgentSocket = socket
            }
        case "compression":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.compression == nil { config.compression = value }
        case "batchmode":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.batchMode == nil { config.batchMode = value }
        case "pubkeyauthentication":
            let text = try single().lowercased()
            let value = ["unbound", "host-bound"].contains(text) ? true : try Self.flag(text, keyword: line.keyword, at: at)
            if active && config.pubkeyAuthentication == nil { config.pubkeyAuthentication = value }
        case "passwordauthentication":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.passwordAuthentication == nil { config.passwordAuthentication = value }
        case "kbdinteractiveauthentication", "challengeresponseauthentication":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.keyboardInteractiveAuthentication == nil { config.keyboardInteractiveAuthentication = value }
        case "preferredauthentications":
            let value = try single().split(separator: ",").map { String($0).lowercased() }
            if active && config.preferredAuthentications == nil { config.preferredAuthentications = value }
        case "remotecommand":
            guard !arguments.isEmpty else { throw at.error("RemoteCommand needs a command") }
            // `none` (what scp passes): no remote command from the files; the empty text marks it.
            let value = arguments.count == 1 && arguments[0].lowercased() == "none" ? "" : arguments.joined(separator: " ")
            if active && config.remoteCommand == nil { config.remoteCommand = value }
        case "proxyjump":
            let value = try single()
            if active && config.proxyJump == nil { config.proxyJump = value.lowercased() == "none" ? "" : value }
        case "clearallforwardings":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.clearAllForwardings == nil { config.clearAllForwardings = value }
        case "forwardx11", "forwardx11trusted", "permitlocalcommand":
            // What scp and sftp pass (`no`) is what this client does; `yes` is refused, never ignored.
            let text = try single().lowercased()
            let off = ["no", "false"].contains(text)
            if active && !off {
                throw at.error("\(line.keyword) \(arguments[0]) is not supported by this client; leave it out or set it to no")
            }
        case "hashknownhosts":
            let value = try Self.flag(try single(), keyword: line.keyword, at: at)
            if active && config.hashKnownHosts == nil { config.hashKnownHosts = value }
        case "hostkeyalias":
            let value = try single()
            if active && config.hostKeyAlias == nil { config.hostKeyAlias = value }
        case "escapechar":
            let value = try single()
            guard SSHConfigResolver.escapeCharacter(value) != nil || value.lowercased() == "none" else {
                throw at.error("EscapeChar \(value) is not one character, ^ and a letter, or none")
            }
            if active && config.escapeChar == nil { config.escapeChar = value }
        case "ciphers", "kexalgorithms", "hostkeyalgorithms", "macs", "pubkeyacceptedalgorithms", "pubkeyacceptedkeytypes":
            // What the key exchange offers is OpenSSH's default here: a list set for the host is
            // refused rather than ignored, since ssh would offer something else.
            if active {
                throw at.error("\(line.keyword) is not supported by this client (it offers OpenSSH's default algorithms); "
                               + "remove it for this host, or use ssh with ProxyCommand")
            }
        case let name where SSHConfigKeywords.known.contains(name):
            break   // an OpenSSH option this client does not use
        case let name:
            if let ignoreUnknown, SSHPattern.matchesList(name, list: ignoreUnknown) { return }
            throw at.error("\(line.keyword) is not an ssh_config keyword (see ssh_config(5)); "
                           + "to keep a newer one for ssh, put 'IgnoreUnknown \(line.keyword)' above it")
        }
    }

    /// yes/true or no/false.
    static func flag(_ value: String, keyword: String, at: Location) throws(SSHConfigError) -> Bool {
        switch value.lowercased() {
        case "yes", "true": return true
        case "no", "false": return false
        default: throw at.error("\(keyword) \(value) is not yes or no")
        }
    }

    /// OpenSSH's time format: seconds, or numbers with s, m, h, d, w (`90`, `1m30s`).
    static func time(_ value: String, keyword: String, at: Location) throws(SSHConfigError) -> Duration {
        var total = 0
        var digits = ""
        let bad = at.error("\(keyword) \(value) is not a time (seconds, or e.g. 30s, 5m, 1h30m)")
        for character in value {
            if character.isASCII && character.isNumber {
                digits.append(character)
                continue
            }
            let unit: Int
            switch character.lowercased() {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86_400
            case "w": unit = 604_800
            default: throw bad
            }
            guard let number = Int(digits) else { throw bad }
            let (product, overflow) = number.multipliedReportingOverflow(by: unit)
            guard !overflow, total <= Int(Int32.max) - product else { throw bad }
            total += product
            digits = ""
        }
        if !digits.isEmpty {
            guard let number = Int(digits), total <= Int(Int32.max) - number else { throw bad }
            total += number
        } else if value.isEmpty {
            throw bad
        }
        return .seconds(total)
    }

    /// The settings, with the command line's user and port first and every token expanded.
    func finish(user givenUser: String?, port givenPort: Int?, context: SSHConfigContext) throws(SSHConfigError) -> SSHHostConfig {
        var config = self.config
        if let hostName {
            config.hostName = try Self.expand(hostName, tokens: ["h": host], environment: nil).lowercased()
        }
        config.user = givenUser ?? user
        config.port = givenPort ?? port
        let localHost = context.localHostName
        let tokens: [Character: String] = [
            "d": context.homeDirectory, "h": config.hostName, "i": String(context.userID),
            "k": host, "L": String(localHost.prefix(while: { $0 != "." })), "l": localHost, "n": host,
            "p": String(config.port ?? 22), "r": config.user ?? context.localUser, "u": context.localUser, "j": "",
        ]
        func path(_ located: Located) throws(SSHConfigError) -> String {
            guard let tilde = SSHConfigResolver.expandTilde(located.value, context: context) else {
                throw located.at.error("\(located.value): no such user's home directory")
            }
            return try Self.expand(Located(value: tilde, at: located.at), tokens: tokens, environment: context.environment)
        }
        config.identityFiles = []
        for file in identityFiles { config.identityFiles.append(try path(file)) }
        config.certificateFiles = []
        for file in certificateFiles { config.certificateFiles.append(try path(file)) }
        if let knownHostsFiles {
            var expanded: [String] = []
            for file in knownHostsFiles where file.value.lowercased() != "none" { expanded.append(try path(file)) }
            config.userKnownHostsFiles = expanded
        }
        if let globalKnownHostsFiles {
            var expanded: [String] = []
            for file in globalKnownHostsFiles where file.value.lowercased() != "none" { expanded.append(try path(file)) }
            config.globalKnownHostsFiles = expanded
        }
        return config
    }

    /// `${VAR}` from `environment` (when given), then `%x` tokens from `tokens` (and `%%`), in
    /// OpenSSH's order.
    static func expand(_ located: Located, tokens: [Character: String], environment: [String: String]?) throws(SSHConfigError) -> String {
        var text = located.value
        if let environment {
            var output = ""
            var rest = Substring(text)
            while let start = rest.firstRange(of: "${") {
                output += rest[..<start.lowerBound]
                guard let end = rest[start.upperBound...].firstIndex(of: "}") else {
                    throw located.at.error("\(located.value): '${' without its '}'")
                }
                let name = String(rest[start.upperBound..<end])
                guard let value = environment[name] else {
                    throw located.at.error("\(located.value): the environment variable \(name) is not set")
                }
                output += value
                rest = rest[rest.index(after: end)...]
            }
            text = output + rest
        }
        var result = ""
        var iterator = text.makeIterator()
        while let character = iterator.next() {
            guard character == "%" else {
                result.append(character)
                continue
            }
            guard let token = iterator.next() else {
                throw located.at.error("\(located.value) ends with a lone '%' (write %% for a percent sign)")
            }
            if token == "%" {
                result.append("%")
            } else if let value = tokens[token] {
                result += value
            } else {
                throw located.at.error("\(located.value): the token %\(token) is not supported here")
            }
        }
        return result
    }
}

/// OpenSSH's wildcard patterns (`match_pattern`): `*` any run of characters, `?` any one;
/// case-sensitive, as ssh compares the host as given with the pattern as written.
enum SSHPattern {
    /// Whether all of `text` matches `pattern`.
    static func matches(_ text: String, pattern: String) -> Bool {
        let text = Array(text.unicodeScalars), pattern = Array(pattern.unicodeScalars)
        var t = 0, p = 0
        var star: Int?
        var resume = 0
        while t < text.count {
            if p < pattern.count && (pattern[p] == "?" || pattern[p] == text[t]) {
                t += 1
                p += 1
            } else if p < pattern.count && pattern[p] == "*" {
                star = p
                resume = t
                p += 1
            } else if let star {
                p = star + 1
                resume += 1
                t = resume
            } else {
                return false
            }
        }
        while p < pattern.count && pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }

    /// A comma-separated list with `!` negations (`match_pattern_list`, lower-cased): a negated
    /// match is false, else any match is true.
    static func matchesList(_ text: String, list: String) -> Bool {
        var matched = false
        for raw in list.lowercased().split(separator: ",") {
            let pattern = String(raw)
            if pattern.hasPrefix("!") {
                if matches(text, pattern: String(pattern.dropFirst())) { return false }
            } else if matches(text, pattern: pattern) {
                matched = true
            }
        }
        return matched
    }
}

extension SSHConfigResolver {
    /// An `EscapeChar` (or `-e`) value as the byte it stands for: one character, or `^` and a
    /// letter (a control character); nil for `none` or anything else.
    public static func escapeCharacter(_ value: String) -> UInt8? {
        let bytes = Array(value.utf8)
        if bytes.count == 1, bytes[0] < 0x80 { return bytes[0] }
        if bytes.count == 2, bytes[0] == UInt8(ascii: "^"), (0x40...0x7e).contains(bytes[1] & ~0x20) {
            return (bytes[1] & ~0x20) & 0x1f
        }
        return nil
    }
}
