import AccessCore
import CFAccessSSH
import ToolDecisions
import Testing

/// What `shell` decides before it connects (issue 25 part 1): ssh's terminal choice, the key
/// files, what runs, whether it reconnects. Pure functions of the tool, no process.
@Suite("shell's plan")
struct ShellPlanTests {
    @Test("the terminal request: -T, -tt, -t win over RequestTTY; without a flag RequestTTY, else auto")
    func terminalRequest() {
        #expect(ShellPlan.terminalRequest(noTerminal: true, terminalRequests: 0, configured: .force) == .no)
        #expect(ShellPlan.terminalRequest(noTerminal: false, terminalRequests: 2, configured: .no) == .force)
        #expect(ShellPlan.terminalRequest(noTerminal: false, terminalRequests: 3, configured: nil) == .force)
        #expect(ShellPlan.terminalRequest(noTerminal: false, terminalRequests: 1, configured: .no) == .yes)
        #expect(ShellPlan.terminalRequest(noTerminal: false, terminalRequests: 0, configured: .no) == .no)
        #expect(ShellPlan.terminalRequest(noTerminal: false, terminalRequests: 0, configured: nil) == .auto)
    }

    @Test("a terminal as ssh gives one: auto for a shell, not for a command; yes and force even for a command; without a local terminal only force, with ssh's line")
    func wantsTerminal() {
        let notice = "Pseudo-terminal will not be allocated because stdin is not a terminal."
        #expect(ShellPlan.wantsTerminal(.auto, hasCommand: false, stdinIsTerminal: true) == (true, nil))
        #expect(ShellPlan.wantsTerminal(.auto, hasCommand: true, stdinIsTerminal: true) == (false, nil))
        #expect(ShellPlan.wantsTerminal(.yes, hasCommand: true, stdinIsTerminal: true) == (true, nil))
        #expect(ShellPlan.wantsTerminal(.no, hasCommand: false, stdinIsTerminal: true) == (false, nil))
        #expect(ShellPlan.wantsTerminal(.auto, hasCommand: false, stdinIsTerminal: false) == (false, notice))
        #expect(ShellPlan.wantsTerminal(.yes, hasCommand: true, stdinIsTerminal: false) == (false, notice))
        #expect(ShellPlan.wantsTerminal(.force, hasCommand: true, stdinIsTerminal: false) == (true, nil))
        #expect(ShellPlan.wantsTerminal(.auto, hasCommand: true, stdinIsTerminal: false) == (false, nil), "nothing to refuse, nothing said")
    }

    @Test("the key files: the short-lived certificate's key, -i keys, readable IdentityFiles not already named; any named key keeps OpenSSH's defaults out")
    func keyFiles() {
        let readable: Set<String> = ["/k/config_key", "/k/dup"]
        let list = ShellPlan.keyFiles(certificate: "/t/host-cf_key", identity: ["/k/dup", "/k/cli"],
                                      identityFiles: ["/k/config_key", "/k/dup", "/k/missing"], isReadable: { readable.contains($0) })
        #expect(list.files == ["/t/host-cf_key", "/k/dup", "/k/cli", "/k/config_key"])
        #expect(list.named)
        let none = ShellPlan.keyFiles(certificate: "/t/host-cf_key", identity: [], identityFiles: [], isReadable: { _ in true })
        #expect(none.files == ["/t/host-cf_key"] && !none.named, "the certificate alone does not keep the default files out")
        let configOnly = ShellPlan.keyFiles(certificate: nil, identity: [], identityFiles: ["/k/missing"], isReadable: { _ in false })
        #expect(configOnly.files.isEmpty && configOnly.named, "an IdentityFile named in ssh_config counts even when missing, as in ssh")
    }

    @Test("what runs: -N forwards only; a terminal (with the command if any); a command; the login shell on stdin; --tmux without a terminal is refused")
    func mode() throws {
        #expect(try ShellPlan.mode(noCommand: true, terminal: false, command: nil, tmux: nil) == .forwardsOnly)
        #expect(try ShellPlan.mode(noCommand: false, terminal: true, command: "top", tmux: nil) == .terminal(command: "top"))
        #expect(try ShellPlan.mode(noCommand: false, terminal: true, command: nil, tmux: "main") == .terminal(command: nil))
        #expect(try ShellPlan.mode(noCommand: false, terminal: false, command: "uptime", tmux: nil) == .command("uptime"))
        #expect(try ShellPlan.mode(noCommand: false, terminal: false, command: nil, tmux: nil) == .shellWithoutTerminal)
        #expect(throws: ConfigurationError.self) { try ShellPlan.mode(noCommand: false, terminal: false, command: nil, tmux: "main") }
    }

    @Test("reconnects: a shell on a local terminal and -N; never a command, never with --no-reconnect, not a shell reading a pipe")
    func reconnects() {
        #expect(ShellPlan.reconnects(noReconnect: false, hasCommand: false, noCommand: false, stdinIsTerminal: true))
        #expect(ShellPlan.reconnects(noReconnect: false, hasCommand: false, noCommand: true, stdinIsTerminal: false))
        #expect(!ShellPlan.reconnects(noReconnect: false, hasCommand: true, noCommand: false, stdinIsTerminal: true))
        #expect(!ShellPlan.reconnects(noReconnect: true, hasCommand: false, noCommand: false, stdinIsTerminal: true))
        #expect(!ShellPlan.reconnects(noReconnect: false, hasCommand: false, noCommand: false, stdinIsTerminal: false))
    }

    @Test("the methods ssh_config allows: each toggle; PreferredAuthentications keeps only its names, in OpenSSH's order, and refuses another order")
    func allowedMethods() throws {
        #expect(try ShellPlan.allowedMethods(publicKey: nil, keyboardInteractive: nil, password: nil, preferred: nil)
                == [.publicKey, .keyboardInteractive, .password])
        #expect(try ShellPlan.allowedMethods(publicKey: false, keyboardInteractive: nil, password: false, preferred: nil) == [.keyboardInteractive])
        #expect(try ShellPlan.allowedMethods(publicKey: nil, keyboardInteractive: nil, password: nil, preferred: ["publickey", "password"])
                == [.publicKey, .password])
        #expect(try ShellPlan.allowedMethods(publicKey: false, keyboardInteractive: nil, password: nil,
                                             preferred: ["gssapi-with-mic", "publickey", "password"]) == [.password])
        #expect(throws: ConfigurationError.self) {
            try ShellPlan.allowedMethods(publicKey: nil, keyboardInteractive: nil, password: nil, preferred: ["password", "publickey"])
        }
    }

    @Test("the command: the command line's, else RemoteCommand; both at once is ssh's error")
    func remoteCommand() throws {
        #expect(try ShellPlan.remoteCommand(commandLine: ["uname", "-a"], configured: nil) == "uname -a")
        #expect(try ShellPlan.remoteCommand(commandLine: [], configured: "tmux attach") == "tmux attach")
        #expect(try ShellPlan.remoteCommand(commandLine: [], configured: nil) == nil)
        #expect(throws: ConfigurationError("Cannot execute command-line and remote command.")) {
            try ShellPlan.remoteCommand(commandLine: ["true"], configured: "tmux attach")
        }
    }

    @Test("-W host:port and -J [user@]host[:port] read as ssh reads them; a list of jumps and bad values refused")
    func destinations() throws {
        #expect(try ShellPlan.stdioForward("intranet:22") == ("intranet", 22))
        #expect(try ShellPlan.stdioForward("[2001:db8::1]:443") == ("2001:db8::1", 443))
        for bad in ["intranet", ":22", "intranet:0", "intranet:x", "a b:22"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try ShellPlan.stdioForward(bad) }
        }
        let full = try ShellPlan.jump("me@jump.example.com:2222")
        #expect(full.user == "me" && full.host == "jump.example.com" && full.port == 2222)
        let bare = try ShellPlan.jump("jump.example.com")
        #expect(bare.user == nil && bare.host == "jump.example.com" && bare.port == nil)
        for bad in ["a@h1,b@h2", "@host", "me@", "host:70000", "host/x"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try ShellPlan.jump(bad) }
        }
    }

    @Test("progress lines only for an interactive session on a terminal; a subsystem, -W and -N are modes of their own")
    func progressAndModes() throws {
        #expect(ShellPlan.showsProgress(.terminal(command: nil), stdinIsTerminal: true))
        #expect(!ShellPlan.showsProgress(.terminal(command: nil), stdinIsTerminal: false))
        #expect(!ShellPlan.showsProgress(.command("ls"), stdinIsTerminal: true))
        #expect(!ShellPlan.showsProgress(.forwardsOnly, stdinIsTerminal: true))
        #expect(try ShellPlan.mode(noCommand: false, terminal: false, command: "sftp", tmux: nil, subsystem: true) == .subsystem("sftp"))
        #expect(throws: ConfigurationError.self) { try ShellPlan.mode(noCommand: false, terminal: false, command: nil, tmux: nil, subsystem: true) }
        #expect(try ShellPlan.mode(noCommand: false, terminal: true, command: nil, tmux: nil, stdioForward: ("h", 22)) == .stdioForward(host: "h", port: 22))
        #expect(try ShellPlan.remoteCommand(commandLine: [], configured: "") == nil, "RemoteCommand none")
    }

    @Test("the agent forwarded: -a wins, then -A (SSH_AUTH_SOCK's), then ForwardAgent (yes: SSH_AUTH_SOCK's; $NAME and ~/ resolved); no agent is said, not guessed")
    func forwardedAgent() {
        let environment = ["SSH_AUTH_SOCK": "/run/agent", "MINE": "/run/mine", "HOME": "/home/me"]
        func decide(_ flag: Bool, off: Bool = false, _ configured: Bool?, socket: String? = nil,
                    environment: [String: String] = environment) -> ShellPlan.ForwardedAgent? {
            ShellPlan.forwardedAgent(flag: flag, off: off, configured: configured, socket: socket, environment: environment)
        }
        #expect(decide(false, nil) == nil)
        #expect(decide(false, false) == nil)
        #expect(decide(true, nil) == .socket("/run/agent"))
        #expect(decide(true, off: true, true) == nil)
        #expect(decide(false, true) == .socket("/run/agent"))
        #expect(decide(false, true, socket: "$MINE") == .socket("/run/mine"))
        #expect(decide(true, true, socket: "$MINE") == .socket("/run/agent"), "-A forwards SSH_AUTH_SOCK's agent")
        #expect(decide(false, true, socket: "~/a.sock") == .socket("/home/me/a.sock"))
        #expect(decide(false, true, socket: "/tmp/a.sock") == .socket("/tmp/a.sock"))
        #expect(decide(true, nil, environment: [:]) == .unavailable("agent forwarding: no ssh-agent (SSH_AUTH_SOCK is not set)"))
        #expect(decide(false, true, socket: "$NONE") == .unavailable("ForwardAgent $NONE: the variable NONE is not set"))
        #expect(decide(false, true, socket: "~/a", environment: [:]) == .unavailable("ForwardAgent ~/a: HOME is not set"))
    }

    @Test("-G prints the resolved settings as ssh -G: lower-case keyword lines, a keyword per key file, proxyjump only when set")
    func resolvedSettings() {
        let text = ShellPlan.resolvedSettings(user: "me", hostName: "ssh.example.com", port: 2222, identityFiles: ["/k/a", "/k/b"],
                                              userKnownHostsFiles: ["/h/kh", "/h/kh2"], globalKnownHostsFiles: ["/etc/kh"],
                                              batchMode: true, proxyJump: nil)
        #expect(text == "user me\nhostname ssh.example.com\nport 2222\nidentityfile /k/a\nidentityfile /k/b\n"
                + "userknownhostsfile /h/kh /h/kh2\nglobalknownhostsfile /etc/kh\nbatchmode yes\n")
        #expect(ShellPlan.resolvedSettings(user: "u", hostName: "h", port: 22, identityFiles: [], userKnownHostsFiles: [],
                                           globalKnownHostsFiles: [], batchMode: false, proxyJump: "j@jump:22").hasSuffix("proxyjump j@jump:22\n"))
    }
}
