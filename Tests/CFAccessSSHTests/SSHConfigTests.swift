import CFAccessSSH
import Foundation
import Testing

/// ssh_config files parsed and applied as OpenSSH does (issue 16 point 12), without I/O: the
/// files are strings, `Include` reads from a dictionary.
@Suite("ssh_config: parsing, Host patterns, first value wins, tokens, mistakes")
struct SSHConfigTests {
    private let context = SSHConfigContext(homeDirectory: "/home/me", localUser: "me", userID: 1000,
                                           localHostName: "laptop.example.net", environment: ["KEYS": "/keys"]) { name in
        name == "other" ? "/home/other" : nil
    }

    private func resolve(_ text: String, host: String, user: String? = nil, port: Int? = nil, options: [String] = [],
                         includes: [String: String] = [:]) throws -> SSHHostConfig {
        let files = [try SSHConfigFile(commandLineOptions: options), try SSHConfigFile(text: text, path: "/home/me/.ssh/config")]
        let resolver = SSHConfigResolver(files: files, context: context) { pattern, kind throws(SSHConfigError) in
            var found: [SSHConfigFile] = []
            for (path, text) in includes.sorted(by: { $0.key < $1.key }) where path == pattern
                || (pattern.hasSuffix("*") && path.hasPrefix(String(pattern.dropLast()))) {
                found.append(try SSHConfigFile(text: text, path: path, kind: kind))
            }
            return found
        }
        return try resolver.resolve(host: host, user: user, port: port)
    }

    private func failure(_ text: String, host: String = "any", options: [String] = []) -> SSHConfigError? {
        do {
            _ = try resolve(text, host: host, options: options)
            return nil
        } catch let error as SSHConfigError {
            return error
        } catch {
            return nil
        }
    }

    @Test("Host blocks: the first value wins; HostName, User, Port; patterns with *, ? and !")
    func hostBlocks() throws {
        let text = """
        # work machines
        Host work
            HostName ssh.example.com
            User alice
        Host *.example.com !secret.example.com
            Port 2222
            User bob
        Host db?.internal
            User dba
        Host *
            User everyone
            Port 22
        """
        let work = try resolve(text, host: "work")
        #expect(work.hostName == "ssh.example.com")
        #expect(work.user == "alice")
        #expect(work.port == 22)      // `Host *.example.com` matches the given name, not the HostName
        let other = try resolve(text, host: "git.example.com")
        #expect(other.hostName == "git.example.com")
        #expect(other.user == "bob")
        #expect(other.port == 2222)
        let secret = try resolve(text, host: "secret.example.com")
        #expect(secret.user == "everyone")
        #expect(secret.port == 22)
        #expect(try resolve(text, host: "db1.internal").user == "dba")
        #expect(try resolve(text, host: "db10.internal").user == "everyone")
        // Patterns are compared with the host as given, case and all (as OpenSSH does); the
        // name connected to is lower-cased.
        #expect(try resolve(text, host: "WORK").hostName == "work")
        #expect(try resolve("Host WORK\n  User upper\n", host: "work").user == nil)
        #expect(try resolve("Host WORK\n  User upper\n", host: "WORK").user == "upper")
        // Lines before the first Host apply to every host.
        #expect(try resolve("User first\nHost x\n  User second\n", host: "x").user == "first")
    }

    @Test("the command line wins: user@host, -l and -p over User and Port; -o over the files")
    func commandLineFirst() throws {
        let text = "Host h\n  User fileuser\n  Port 2200\n  HostName file.example.com\n"
        let given = try resolve(text, host: "h", user: "me", port: 2022)
        #expect(given.user == "me")
        #expect(given.port == 2022)
        let options = try resolve(text, host: "h", options: ["Port=2300", "HostName opt.example.com", "user = optuser"])
        #expect(options.port == 2300)
        #expect(options.hostName == "opt.example.com")
        #expect(options.user == "optuser")
    }

    @Test("syntax: Keyword=value, quotes, escapes, comments, case-insensitive keywords, CRLF")
    func syntax() throws {
        let text = "HOST=q\r\n  hostname = \"quoted.example.com\"  # a comment\r\n  IdentityFile \"/keys/my key\"\n"
            + "  IdentityFile /keys/back\\ slash\n  SendEnv 'A_*' B\n\n   # indented comment\n"
        let config = try resolve(text, host: "q")
        #expect(config.hostName == "quoted.example.com")
        #expect(config.identityFiles == ["/keys/my key", "/keys/back slash"])
        #expect(config.sendEnv == ["A_*", "B"])
    }

    @Test("IdentityFile and CertificateFile add up; tokens, ~ and ${VAR} are expanded")
    func identityFilesAndTokens() throws {
        let text = """
        Host h
            HostName %h.example.com
            User bob
            Port 2201
            IdentityFile ~/.ssh/%r@%h-%p
            IdentityFile ${KEYS}/%u-%n-%i-%L-%l-%d
            CertificateFile ~other/certs/%r-cert.pub
            UserKnownHostsFile ~/.ssh/kh_%h /tmp/second
        Host *
            IdentityFile ~/.ssh/id_last
        """
        let config = try resolve(text, host: "h")
        #expect(config.hostName == "h.example.com")
        #expect(config.identityFiles == ["/home/me/.ssh/bob@h.example.com-2201",
                                         "/keys/me-h-1000-laptop-laptop.example.net-/home/me",
                                         "/home/me/.ssh/id_last"])
        #expect(config.certificateFiles == ["/home/other/certs/bob-cert.pub"])
        #expect(config.userKnownHostsFiles == ["/home/me/.ssh/kh_h.example.com", "/tmp/second"])
        // %r is the user the command line gave; %p 22 when nothing sets a port.
        let given = try resolve("IdentityFile /k/%r-%p-%%\n", host: "x", user: "carol")
        #expect(given.identityFiles == ["/k/carol-22-%"])
        #expect(try resolve("UserKnownHostsFile none\n", host: "x").userKnownHostsFiles == [])
    }

    @Test("the other keywords used: IdentitiesOnly, ServerAlive*, ConnectTimeout, StrictHostKeyChecking, RequestTTY, LogLevel")
    func typedValues() throws {
        let text = """
        Host h
            IdentitiesOnly yes
            ServerAliveInterval 1m30s
            ServerAliveCountMax 5
            ConnectTimeout 20
            StrictHostKeyChecking accept-new
            RequestTTY force
            LogLevel quiet
        Host *
            IdentitiesOnly no
            StrictHostKeyChecking no
        """
        let config = try resolve(text, host: "h")
        #expect(config.identitiesOnly == true)
        #expect(config.serverAliveInterval == .seconds(90))
        #expect(config.serverAliveCountMax == 5)
        #expect(config.connectTimeout == .seconds(20))
        #expect(config.strictHostKeyChecking == .acceptNew)
        #expect(config.requestTTY == .force)
        #expect(config.logLevel == "QUIET")
        #expect(config.isQuiet)
        let other = try resolve(text, host: "other")
        #expect(other.identitiesOnly == false)
        #expect(other.strictHostKeyChecking == SSHStrictHostKeyChecking.no)
        #expect(other.serverAliveInterval == nil)
        #expect(!other.isQuiet)
        // StrictHostKeyChecking becomes the library's checking; `no` never trusts a changed key.
        #expect(SSHHostKeyChecking(SSHStrictHostKeyChecking.yes) == .strict)
        #expect(SSHHostKeyChecking(SSHStrictHostKeyChecking.acceptNew) == .acceptNew)
        #expect(SSHHostKeyChecking(SSHStrictHostKeyChecking.no) == .acceptNew)
        #expect(SSHHostKeyChecking(SSHStrictHostKeyChecking.ask) == .ask)
        for (value, seconds) in [("0", 0), ("45", 45), ("2m", 120), ("1h", 3600), ("1d", 86_400), ("1w1s", 604_801), ("10S", 10)] {
            #expect(try resolve("ServerAliveInterval \(value)\n", host: "x").serverAliveInterval == .seconds(seconds), "\(value)")
        }
    }

    @Test("SendEnv adds up and -PATTERN removes; SetEnv: the first line that applies; the variables sent")
    func environment() throws {
        let text = """
        Host h
            SendEnv LC_* CFAT_ONE
            SetEnv FOO=bar EMPTY=
        Host *
            SendEnv -LC_* LANG
            SetEnv NEVER=used
        """
        let config = try resolve(text, host: "h")
        #expect(config.sendEnv == ["CFAT_ONE", "LANG"])
        #expect(config.setEnv == ["FOO": "bar", "EMPTY": ""])
        let local = ["LANG": "C.UTF-8", "LC_TIME": "de_DE.UTF-8", "CFAT_ONE": "1", "CFAT_TWO": "2", "FOO": "local"]
        #expect(config.environment(sending: local) == ["LANG": "C.UTF-8", "CFAT_ONE": "1", "FOO": "bar", "EMPTY": ""])
        let other = try resolve(text, host: "other")
        #expect(other.setEnv == ["NEVER": "used"])
        #expect(other.environment(sending: local) == ["LANG": "C.UTF-8", "NEVER": "used"])
        // Debian's defaults send the locale.
        let debian = try SSHConfigResolver(files: [SSHConfigFile.debianDefaults], context: context).resolve(host: "any")
        #expect(debian.environment(sending: local) == ["LANG": "C.UTF-8", "LC_TIME": "de_DE.UTF-8"])
    }

    @Test("Include: relative to ~/.ssh, wildcards, conditional inside a Host block, nesting bounded")
    func include() throws {
        let includes = [
            "/home/me/.ssh/config.d/10-work": "Host work\n  HostName w.example.com\n",
            "/home/me/.ssh/config.d/20-all": "User included\n",
            "/etc/extra": "Port 2022\nHost *\n  IdentityFile /k/extra\n",
        ]
        let text = "Include config.d/*\nHost special\n  Include /etc/extra\nHost *\n  Port 2200\n"
        let work = try resolve(text, host: "work", includes: includes)
        #expect(work.hostName == "w.example.com")
        #expect(work.user == "included")
        #expect(work.port == 2200)
        #expect(work.identityFiles.isEmpty)   // /etc/extra's Host * cannot turn an inactive Include on
        let special = try resolve(text, host: "special", includes: includes)
        #expect(special.port == 2022)
        #expect(special.identityFiles == ["/k/extra"])
        let loop = failure("Include /loop\n", options: [])
        #expect(loop == nil)   // no such file: nothing included
        do {
            _ = try resolve("Include /loop\n", host: "x", includes: ["/loop": "Include /loop\n"])
            Issue.record("a file including itself was accepted")
        } catch let error as SSHConfigError {
            #expect(error.reason.contains("nested too deeply"))
        }
    }

    @Test("Match blocks are skipped and listed; Match all applies")
    func match() throws {
        let text = "Match host h exec \"true\"\n  User matched\nMatch all\n  Port 2022\nHost h\n  User hosted\n"
        let config = try resolve(text, host: "h")
        #expect(config.user == "hosted")
        #expect(config.port == 2022)
        #expect(config.skippedMatchBlocks == ["/home/me/.ssh/config:1"])
    }

    @Test("RemoteForward adds up (a remote SOCKS proxy is refused); ExitOnForwardFailure; ForwardAgent yes, no, or the socket it names")
    func remoteForwardsAndAgent() throws {
        let config = try resolve("Host x\n  RemoteForward 8080 localhost:80\n  RemoteForward [::1]:0 [2001:db8::1]:443\n"
                                 + "  ExitOnForwardFailure yes\n  ForwardAgent yes\nHost *\n  RemoteForward 9 h:9\n  ForwardAgent no\n", host: "x")
        #expect(config.remoteForwards == [SSHRemoteForward(port: 8080, host: "localhost", hostPort: 80),
                                          SSHRemoteForward(bindAddress: "::1", port: 0, host: "2001:db8::1", hostPort: 443),
                                          SSHRemoteForward(port: 9, host: "h", hostPort: 9)])
        #expect(config.exitOnForwardFailure == true)
        #expect(config.forwardAgent == true && config.forwardAgentSocket == nil)
        let named = try resolve("Host *\n  ForwardAgent $MY_AGENT\n", host: "x")
        #expect(named.forwardAgent == true && named.forwardAgentSocket == "$MY_AGENT")
        #expect(try resolve("Host *\n  ForwardAgent ~/agent.sock\n", host: "x").forwardAgentSocket == "~/agent.sock")
        #expect(try resolve("Host *\n  ForwardAgent no\n", host: "x").forwardAgent == false)
        #expect(failure("Host *\n  RemoteForward 8080\n")?.description.contains("a remote SOCKS proxy is not supported") == true)
        #expect(failure("Host *\n  RemoteForward 8080 nohostport\n")?.description.contains("is not [bind_address:]port host:hostport") == true)
        #expect(failure("Host *\n  ForwardAgent maybe\n") != nil)
    }

    @Test("keywords ssh knows but this client does not use are ignored; unknown words are errors with file:line; IgnoreUnknown")
    func unknownKeywords() throws {
        let known = try resolve("Host *\n  Compression yes\n  ForwardAgent no\n  ControlMaster auto\n  GSSAPIAuthentication yes\n", host: "x")
        // What would change ssh's behaviour and this client does not do is refused, not ignored.
        #expect(throws: SSHConfigError.self) { try resolve("Host *\n  ForwardX11 yes\n", host: "x") }
        #expect(throws: SSHConfigError.self) { try resolve("Host x\n  Ciphers aes128-ctr\n", host: "x") }
        #expect(try resolve("Host other\n  Ciphers aes128-ctr\n", host: "x").host == "x", "not for this host: not refused")
        #expect(known.hostName == "x")
        let error = failure("Host *\n  User a\n  Prot 22\n")
        #expect(error?.description.hasPrefix("/home/me/.ssh/config:3: Prot is not an ssh_config keyword") == true, "\(String(describing: error))")
        // In a block that does not apply too, as ssh checks every line.
        #expect(failure("Host other\n  Bogus 1\n")?.line == 2)
        #expect(try resolve("IgnoreUnknown Bogus*,Newer\nBogusOption 1\nNewer x\n", host: "x").hostName == "x")
        #expect(failure("BogusOption 1\nIgnoreUnknown Bogus*\n")?.line == 1)   // must come before
        #expect(failure("", options: ["Prot=22"])?.description.hasPrefix("-o Prot=22: Prot is not an ssh_config keyword") == true)
    }

    @Test("malformed lines: one error naming the file and line, what is wrong and what to do")
    func malformed() {
        let cases: [(String, Int, String)] = [
            ("Port abc\n", 1, "Port abc is not a port number"),
            ("Host x\n  Port 70000\n", 2, "Port 70000 is not a port number"),
            ("\nHostName\n", 2, "no argument after the keyword HostName"),
            ("HostName \"unclosed\n", 1, "the quotes do not close"),
            ("User a b\n", 1, "User takes one value, not 2"),
            ("IdentitiesOnly maybe\n", 1, "IdentitiesOnly maybe is not yes or no"),
            ("StrictHostKeyChecking sometimes\n", 1, "StrictHostKeyChecking sometimes is not one of"),
            ("ServerAliveInterval 5x\n", 1, "ServerAliveInterval 5x is not a time"),
            ("ServerAliveCountMax -1\n", 1, "ServerAliveCountMax -1 is not a number"),
            ("SetEnv NOVALUE\n", 1, "SetEnv NOVALUE is not NAME=VALUE"),
            ("SendEnv A=B\n", 1, "SendEnv A=B: a variable name"),
            ("RequestTTY sometimes\n", 1, "RequestTTY sometimes is not one of"),
            ("LogLevel LOUD\n", 1, "LogLevel LOUD is not one of"),
            ("IdentityFile /k/%Z\n", 1, "the token %Z is not supported"),
            ("IdentityFile ${NOPE}/k\n", 1, "the environment variable NOPE is not set"),
            ("IdentityFile ~nobody-here/k\n", 1, "no such user's home directory"),
            ("= value\n", 1, "a line starts with '='"),
        ]
        for (text, line, reason) in cases {
            let error = failure(text)
            #expect(error?.line == line, "\(text): \(String(describing: error))")
            #expect(error?.source == "/home/me/.ssh/config", "\(text)")
            #expect(error?.reason.contains(reason) == true, "\(text): \(String(describing: error))")
        }
        #expect(failure("", options: ["Host=x"])?.reason.contains("cannot be given with -o") == true)
        #expect(failure("", options: ["Port"])?.description == "-o Port: no argument after the keyword Port")
    }
}
