import AccessTestSupport
import AccessCore
import CFAccessTCP
import Testing

/// Issue 13.9: the ranges of the options live in the library, so a library user gets the same
/// checks as the command line; nothing is dialled with an option out of range.
@Suite("AccessTunnel.Options ranges")
struct OptionsValidationTests {
    static let cases: [(String, @Sendable (inout AccessTunnel.Options) -> Void, AccessTunnel.Options.Field, String)] = [
        ("connect timeout 0", { $0.connectTimeout = .zero }, .connectTimeout, "0"),
        ("connect timeout 0.5 s", { $0.connectTimeout = .milliseconds(500) }, .connectTimeout, "0.5"),
        ("connect timeout 601", { $0.connectTimeout = .seconds(601) }, .connectTimeout, "601"),
        ("keepalive -1", { $0.keepaliveInterval = .seconds(-1) }, .keepaliveInterval, "-1"),
        ("keepalive 86401", { $0.keepaliveInterval = .seconds(86_401) }, .keepaliveInterval, "86401"),
        ("half-close linger -0.5", { $0.halfCloseLinger = .milliseconds(-500) }, .halfCloseLinger, "-0.5"),
        ("11 retries", { $0.retry = RetryPolicy(maxAttempts: 12, delays: [.seconds(1)]) }, .retries, "11"),
        ("max connections 0", { $0.limits = ListenerLimits(maxConcurrentConnections: 0, stopAcceptingAfterFirstConnection: false) },
         .maxConcurrentConnections, "0"),
        ("0 carrier threads", { $0.limits.maxCarrierThreads = 0 }, .maxCarrierThreads, "0"),
        ("257 carrier threads", { $0.limits.maxCarrierThreads = 257 }, .maxCarrierThreads, "257"),
        ("spare lifetime 0", { $0.limits.spareConnectionLifetime = .zero }, .spareConnectionLifetime, "0"),
        ("spare lifetime 0.5 s", { $0.limits.spareConnectionLifetime = .milliseconds(500) }, .spareConnectionLifetime, "0.5"),
        ("spare lifetime 301", { $0.limits.spareConnectionLifetime = .seconds(301) }, .spareConnectionLifetime, "301"),
    ]

    @Test("each option out of range is named, with its range and the value given")
    func outOfRange() {
        for (name, change, field, given) in Self.cases {
            var options = AccessTunnel.Options()
            change(&options)
            #expect(throws: AccessTunnel.Options.OutOfRange.self, "\(name)") { try options.validate() }
            do {
                try options.validate()
            } catch {
                #expect(error.field == field, "\(name)")
                #expect(error.given == given, "\(name)")
                #expect(error.description == "\(field.rawValue) must be \(error.allowed) (got \(given))")
            }
        }
    }

    @Test("the defaults and the edges of each range are accepted")
    func inRange() throws {
        try AccessTunnel.Options().validate()
        var options = AccessTunnel.Options(connectTimeout: .seconds(1), retry: RetryPolicy(maxAttempts: 11, delays: [.seconds(1)]),
                                           keepaliveInterval: .zero, halfCloseLinger: .seconds(3600))
        options.limits.maxCarrierThreads = 1
        options.limits.spareConnectionLifetime = .seconds(1)
        try options.validate()
        options = AccessTunnel.Options(connectTimeout: .seconds(600), retry: .never, keepaliveInterval: .seconds(86_400),
                                       halfCloseLinger: .zero)
        options.limits.maxCarrierThreads = 256
        options.limits.spareConnectionLifetime = .seconds(300)
        try options.validate()
        options.limits = .unlimited
        #expect(options.limits.spareConnectionLifetime == ListenerLimits.defaultSpareLifetime)
        try options.validate()
    }

    @Test("connect with an option out of range fails at once as a configuration failure; nothing is dialled")
    func connectRefusesBadOptions() async {
        let transport = ScriptedTransport([.succeed])
        let tunnel = AccessTunnel(options: .init(connectTimeout: .zero), logger: quiet, transport: transport, clock: ManualClock())
        do {
            _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
            Issue.record("connect succeeded with a connect timeout of 0")
        } catch {
            #expect(error.kind == .configuration)
            #expect(error.message == "The tunnel's options are out of range: connectTimeout must be between 1 and 600 seconds (got 0)")
        }
        #expect(transport.probes.isEmpty)
        #expect(tunnel.currentState == .idle)
    }
}
