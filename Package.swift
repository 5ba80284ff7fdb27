// swift-tools-version:6.0
import PackageDescription

/// Settings shared by every Swift target of ours. Empty on purpose: warnings are defects, but
/// `-warnings-as-errors` is passed by our scripts (`scripts/build-flags`, read by scripts/test,
/// scripts/coverage, scripts/bench, scripts/demo), never declared here — SwiftPM refuses
/// `unsafeFlags` in a package that another one depends on by URL and version (issue 19 §1), and a
/// newer compiler's new warning must not break someone else's build of this package.
let strictSwift: [SwiftSetting] = []

/// The Swift runtime and FoundationEssentials linked into the `cf-access-tcp` executable only
/// (issue 5, idle memory): as shared libraries (libswiftCore, FoundationEssentials, …) they cost
/// ~5 MB more RSS before the first connection than the pages a static copy touches
/// (reference/perf.md, "Memory").
/// The shipped modules import FoundationEssentials, never Foundation (issue 18.3): full
/// Foundation brought its internationalisation and ICU data, ~40 MB of a 60 MB stripped binary
/// (reference/perf.md, "Binary size"). `-static-stdlib` alone leaves FoundationEssentials' own
/// dependencies unresolved (its static archive names none of them), so they are listed here;
/// Foundation's other archives (FoundationInternationalization, CoreFoundation, _FoundationICU)
/// are not, so a module that imports Foundation again fails this link instead of quietly making
/// the tool four times bigger. lld resolves archives whatever their order on the command line
/// (gold does not).
/// `--no-export-dynamic` undoes the static runtime's `-export-dynamic` (nothing looks symbols up in
/// the executable, and an exported symbol is never garbage-collected), and
/// `-z pack-relative-relocs` stores the relative relocations as DT_RELR (glibc 2.36, Debian 12's):
/// together they keep the stripped tool under issue 18.3's 20 MB with swift-crypto's BoringSSL in
/// it (reference/DECISIONS.md, "The records' AEAD is BoringSSL's").
/// Unsafe flags are allowed here: SwiftPM checks only the targets of the library products a
/// dependent package uses, and no library product contains the executable's target.
let staticSwiftRuntime: [LinkerSetting] = [.unsafeFlags([
    "-static-stdlib", "-use-ld=lld",
    "-lFoundationEssentials", "-l_FoundationCollections", "-l_FoundationCShims", "-lswiftSynchronization",
    "-Xlinker", "--no-export-dynamic", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
], .when(platforms: [.linux]))]

let package = Package(
    name: "cf-access-tcp",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "CFAccessTCP", targets: ["CFAccessTCP"]),
        .library(name: "CFAccessSSH", targets: ["CFAccessSSH"]),
        .executable(name: "cf-access-tcp", targets: ["CFAccessTCPTool"]),
        .executable(name: "cf-access-edge", targets: ["AccessEdge"]),
        .executable(name: "cf-access-tcp-example", targets: ["TunnelExample"]),
        .executable(name: "cf-access-ssh-example", targets: ["SSHExample"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // BoringSSL's AEAD for the records after the upgrade (RecordAEAD): 4.x carries BoringSSL's
        // VAES AES-GCM; the functions are declared by CCFShim_BoringSSL.h, checked against this
        // version's headers by scripts/check-c-warnings.
        .package(url: "https://github.com/apple/swift-crypto", "4.5.2"..<"5.0.0"),
        // `FileDescriptor`, the descriptor type of TunnelStream's escape hatch (SwiftNIO's own
        // dependency, so a NIO user fetches nothing more).
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.1"),
        // `swift package generate-documentation --target CFAccessTCP` (or CFAccessSSH): the DocC
        // catalogs in Sources/<Target>/<Target>.docc. A plugin only: nothing of it is linked.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // MARK: C libraries from Debian packages
        // libcurl's header only: the library is loaded with dlopen when a login needs it
        // (AccessTransport's CurlLibrary), so no pkgConfig (it would link -lcurl).
        .systemLibrary(name: "CCFCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CCFOpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCFSodium", pkgConfig: "libsodium",
                       providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CCFLibSSH", pkgConfig: "libssh",
                       providers: [.apt(["libssh-dev"])]),
        // libssh2: the engine of sessions that open a terminal while libssh cannot send its modes.
        .systemLibrary(name: "CCFSSH2", pkgConfig: "libssh2",
                       providers: [.apt(["libssh2-1-dev"])]),
        .systemLibrary(name: "CCFQREncode", pkgConfig: "libqrencode",
                       providers: [.apt(["libqrencode-dev"])]),
        // The one thin shim: static inline forwarders for what Swift cannot import. No warning
        // flags here (see `strictSwift`): scripts/check-c-warnings compiles it with -Wall -Werror.
        .target(name: "CCFShim",
                dependencies: ["CCFCurl", "CCFOpenSSL", "CCFSodium"]),

        // MARK: Swift
        // Pure core: models, parsing, request building, decisions. No C, no I/O.
        .target(name: "AccessCore", swiftSettings: strictSwift),
        // The only module that imports C: carrier, listener, stdio bridge, crypto helpers.
        .target(name: "AccessTransport",
                dependencies: [
                    "AccessCore", "CCFShim",
                    "CCFCurl", "CCFOpenSSL", "CCFSodium", "CCFQREncode",
                    .product(name: "Logging", package: "swift-log"),
                    // Linked for BoringSSL's AEAD only (RecordAEAD; declared in CCFShim).
                    .product(name: "Crypto", package: "swift-crypto"),
                ],
                swiftSettings: strictSwift),
        // The library other tools import.
        .target(name: "CFAccessTCP",
                dependencies: ["AccessCore", "AccessTransport",
                               .product(name: "Logging", package: "swift-log"),
                               .product(name: "SystemPackage", package: "swift-system")],
                swiftSettings: strictSwift),
        // The embedded SSH client (issue 10): libssh over a tunnel stream, known_hosts, the
        // Secret Service. A library of its own, so the tunnel library needs no libssh.
        // SSH policy lives here too, as delegates with ready implementations (known_hosts,
        // OpenSSH's authentication order, reconnect): the tool only adds flags and prompts.
        .target(name: "CFAccessSSH",
                dependencies: ["CFAccessTCP", "AccessCore", "AccessTransport", "CCFLibSSH", "CCFSSH2",
                               .product(name: "Logging", package: "swift-log"),
                               .product(name: "SystemPackage", package: "swift-system")],
                swiftSettings: strictSwift),
        // The tool carries its own Swift runtime and FoundationEssentials (see `staticSwiftRuntime`).
        // Writes the git commit into the tool for `--version` (BuildInfo.swift, before each build).
        .plugin(name: "BuildInfo", capability: .buildTool(), path: "Plugins/BuildInfo"),
        // The tool's pure decisions, apart so that a test target can reach them.
        .target(name: "ToolDecisions", dependencies: ["CFAccessSSH", "AccessCore"], swiftSettings: strictSwift),
        .executableTarget(name: "CFAccessTCPTool",
                          dependencies: ["CFAccessTCP", "CFAccessSSH", "AccessCore", "AccessTransport", "ToolDecisions",
                                         // What only the tool changes in its process: OpenSSL's exit
                                         // cleanup, core dumps (ToolProcess).
                                         "CCFShim", "CCFOpenSSL",
                                         .product(name: "ArgumentParser", package: "swift-argument-parser"),
                                         .product(name: "Logging", package: "swift-log"),
                                         .product(name: "SystemPackage", package: "swift-system")],
                          swiftSettings: strictSwift,
                          linkerSettings: staticSwiftRuntime,
                          plugins: ["BuildInfo"]),
        // A runnable example of the library API.
        .executableTarget(name: "TunnelExample", dependencies: ["CFAccessTCP"], path: "Examples/TunnelExample",
                          swiftSettings: strictSwift),
        // A runnable example of the embedded SSH API.
        .executableTarget(name: "SSHExample", dependencies: ["CFAccessSSH", "CFAccessTCP"], path: "Examples/SSHExample",
                          swiftSettings: strictSwift),
        // The local Access edge emulator: SwiftNIO WebSockets (deliberately not the client's own code).
        .executableTarget(name: "AccessEdge",
                          dependencies: [
                              .product(name: "ArgumentParser", package: "swift-argument-parser"),
                              .product(name: "NIOCore", package: "swift-nio"),
                              .product(name: "NIOPosix", package: "swift-nio"),
                              .product(name: "NIOHTTP1", package: "swift-nio"),
                              .product(name: "NIOWebSocket", package: "swift-nio"),
                              .product(name: "NIOSSL", package: "swift-nio-ssl"),
                              "CCFSodium", "CCFOpenSSL",
                          ],
                          swiftSettings: strictSwift),

        // MARK: Tests
        // Shared test doubles and python-made vectors.
        .target(name: "AccessTestSupport",
                dependencies: ["AccessCore", "AccessTransport", "CFAccessTCP", .product(name: "Logging", package: "swift-log")],
                path: "Tests/AccessTestSupport", swiftSettings: strictSwift),
        .testTarget(name: "AccessCoreTests", dependencies: ["AccessCore", "AccessTestSupport"], swiftSettings: strictSwift),
        .testTarget(name: "CFAccessTCPTests",
                    dependencies: ["CFAccessTCP", "AccessCore", "AccessTransport", "AccessTestSupport",
                                   .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strictSwift),
        .testTarget(name: "AccessTransportTests",
                    dependencies: ["AccessTransport", "AccessCore", "AccessTestSupport", "CCFOpenSSL",
                                   .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strictSwift),
        // The SSH policy (authentication order, known_hosts decisions, reconnect, keepalive)
        // with scripted doubles: no sshd.
        .testTarget(name: "CFAccessSSHTests",
                    dependencies: ["CFAccessSSH", "AccessTransport", "AccessCore", "AccessTestSupport", .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strictSwift),
        // The tool's pure decisions (shell's terminal choice, key list, mode): no process.
        .testTarget(name: "CFAccessTCPToolTests",
                    dependencies: ["ToolDecisions", "CFAccessSSH", "AccessCore"],
                    swiftSettings: strictSwift),
        // The emulator's frame reader, checked against the client's framing.
        .testTarget(name: "AccessEdgeTests",
                    dependencies: ["AccessEdge", "AccessTransport",
                                   .product(name: "NIOCore", package: "swift-nio"),
                                   .product(name: "NIOWebSocket", package: "swift-nio")],
                    swiftSettings: strictSwift),
        .testTarget(name: "IntegrationTests",
                    dependencies: ["CFAccessTCP", "CFAccessSSH", "AccessCore", "AccessTransport", "CCFSSH2", "CCFLibSSH", "CCFOpenSSL",
                                   "AccessTestSupport",
                                   .product(name: "Logging", package: "swift-log"),
                                   .product(name: "SystemPackage", package: "swift-system")],
                    swiftSettings: strictSwift),
    ]
)
