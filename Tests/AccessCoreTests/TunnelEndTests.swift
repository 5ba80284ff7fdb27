import AccessCore
import Testing

/// How each way a tunnel ends maps to cleanliness, a failure and a plain line (issue 13.3). The
/// exit statuses are the tool's (`Sources/CFAccessTCPTool/ExitStatus.swift`), checked by the
/// integration tests that run it.
@Suite("tunnel ends")
struct TunnelEndTests {
    @Test("clean ends give no failure", arguments: [
        TunnelEnd.closedByLocal(code: 1000), .closedByEdge(code: 1000), .closedByEdge(code: 1001),
        .closedByEdge(code: nil), .shutdown, .listenerIdle(after: .seconds(600)),
    ])
    func clean(end: TunnelEnd) {
        #expect(end.isClean)
        #expect(end.failure(host: "h.example") == nil)
    }

    @Test("lost tunnels are transport failures, protocol violations and local I/O their own")
    func failures() {
        for end in [TunnelEnd.reset(detail: "Connection reset by peer"), .keepaliveTimeout(after: .seconds(90)),
                    .writeFailed(detail: "x"), .closedByEdge(code: 1011)] {
            #expect(end.failure(host: "h")?.category == .transport, "\(end)")
            #expect(end.failure(host: "h")?.kind == .connectionLost, "\(end)")
        }
        #expect(TunnelEnd.protocolViolation(detail: "x").failure(host: "h")?.category == .protocolViolation)
        #expect(TunnelEnd.localIOFailed(detail: "x").failure(host: "h")?.category == .localResource)
        let refused = TunnelFailure.connectionRefused(address: "127.0.0.1:1")
        #expect(TunnelEnd.failedToOpen(refused).failure(host: "h") == refused)
    }

    @Test("messages are one plain line naming the host and what happened")
    func messages() {
        let reset = TunnelEnd.reset(detail: "Connection reset by peer")
        #expect(reset.message(host: "ssh.example.com")
                == "the edge reset the tunnel to ssh.example.com mid-stream (Connection reset by peer): the connection is lost")
        let failure = TunnelEnd.protocolViolation(detail: "a text frame").failure(host: "ssh.example.com")
        #expect(failure?.category == .protocolViolation)
        #expect(failure?.isRetryable == false)
        #expect(TunnelEnd.keepaliveTimeout(after: .seconds(90)).failure(host: "h")?.category == .transport)
        let idle = TunnelEnd.listenerIdle(after: .seconds(600))
        #expect(idle.message(host: "ssh.example.com") == "the listener for ssh.example.com stopped after 600 s without a connection")
        #expect(idle.description == "listener idle for 600 s")
    }

    @Test("every end has its own plain line, each case")
    func everyMessage() {
        let host = "ssh.example.com"
        #expect(TunnelEnd.closedByEdge(code: 1000).message(host: host) == "the edge closed the tunnel to ssh.example.com (code 1000)")
        #expect(TunnelEnd.closedByEdge(code: nil).message(host: host) == "the edge closed the tunnel to ssh.example.com")
        #expect(TunnelEnd.closedByEdge(code: 1011).message(host: host)
            == "the edge closed the tunnel to ssh.example.com with an error (code 1011): the connection is lost")
        #expect(TunnelEnd.writeFailed(detail: "EPIPE").message(host: host)
            == "writing to the edge failed (EPIPE): the tunnel to ssh.example.com is lost")
        #expect(TunnelEnd.localIOFailed(detail: "cannot write to stdout").message(host: host)
            == "cannot write to stdout; the tunnel to ssh.example.com was closed")
        let refused = TunnelFailure.dns(host: host)
        #expect(TunnelEnd.failedToOpen(refused).message(host: host) == refused.message)
        #expect(TunnelEnd.closedByEdge(code: 1011).failure(host: host)?.category == .transport)
    }
}


/// The conversions the carrier's second-granular settings use.
@Suite("durations in seconds")
struct DurationSecondsTests {
    @Test("whole seconds round a fraction up and never go below zero; seconds keep the fraction")
    func conversions() {
        #expect(Duration.seconds(30).wholeSecondsRoundedUp == 30)
        #expect(Duration.milliseconds(1500).wholeSecondsRoundedUp == 2)
        #expect(Duration.zero.wholeSecondsRoundedUp == 0)
        #expect(Duration.seconds(-3).wholeSecondsRoundedUp == 0)
        #expect(Duration.milliseconds(2500).secondsValue == 2.5)
        #expect(Duration.zero.secondsValue == 0)
    }
}

/// The library's configuration messages name settings in words; a command line names them its
/// own way (issue 19 §4: no flag names in the library).
@Suite("configuration errors name settings")
struct ConfigurationErrorSettingTests {
    @Test("the message says the setting in words; message(naming:) puts another name in its place")
    func naming() throws {
        var thrown: ConfigurationError?
        do { _ = try OriginURL.parse("") } catch { thrown = error }
        let error = try #require(thrown)
        #expect(error.message.hasPrefix("the hostname is empty"))
        #expect(error.settings == [.hostname])
        #expect(error.message(naming: { "--\($0.name)" }).hasPrefix("--hostname is empty"))
        #expect(error.description == error.message)
        #expect(ConfigurationError.Setting.hostname.description == "the hostname")
        for setting in [ConfigurationError.Setting.listenAddress, .allowNonLoopback, .connectTarget, .resolveOverride, .header,
                        .serviceTokenID, .serviceTokenSecret, .serviceTokenIDSource, .serviceTokenSecretSource, .destination] {
            #expect(!setting.name.isEmpty)
        }

        // Two settings, in the order the message names them; one said in no words leaves no gap.
        var token: ConfigurationError?
        do { _ = try ServiceToken(clientID: " ", clientSecret: "s") } catch { token = error }
        let empty = try #require(token)
        #expect(empty.settings == [.serviceTokenID, .serviceTokenIDSource])
        #expect(empty.message == "the service token's client ID is empty: give the service token's Client ID")
        #expect(empty.message(naming: { $0 == .serviceTokenID ? "--id" : " (or set ID)" })
                == "--id is empty: give the service token's Client ID (or set ID)")

        // No flag reaches a library message.
        var listen: ConfigurationError?
        do { _ = try ListenAddress.parse("192.0.2.1:22", allowNonLoopback: false) } catch { listen = error }
        #expect(listen?.message.contains("--") == false)
        #expect(listen?.settings == [.listenAddress, .allowNonLoopback])
        #expect(ConfigurationError("plain") == ConfigurationError("plain"))
        #expect(ConfigurationError("plain").settings.isEmpty)
    }
}

/// Running out of descriptors says the limit when it is known (moved here with ExitStatus's
/// move to the tool).
@Suite("out of file descriptors")
struct OutOfFileDescriptorsTests {
    @Test("the message names the limit when known, and the failure is a retryable local one")
    func message() {
        let fd = TunnelFailure.outOfFileDescriptors(limit: 64, what: "socket(): EMFILE")
        #expect(fd.message.hasPrefix("Too many open files (the limit is 64)"))
        #expect(fd.category == .localResource && fd.isRetryable)
        #expect(TunnelFailure.outOfFileDescriptors(limit: nil, what: "x").message.hasPrefix("Too many open files: "))
    }
}
