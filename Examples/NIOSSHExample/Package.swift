// swift-tools-version:6.0
// A swift-nio-ssh client over a Cloudflare Access tunnel with no TCP port: a package of its own,
// so swift-nio-ssh stays out of cf-access-tcp's dependency graph, and proof that another SSH
// tool can import the library.
import PackageDescription

/// cf-access-tcp: this repository by default. Your own package would name it by URL and version:
/// `.package(url: "https://…/cf-access-tcp.git", from: "0.1.0")`. The outside-package test
/// (scripts/build-outside-package) does exactly that, with a tagged clone, through these two
/// variables.
let cfAccessTCP: Package.Dependency = {
    let environment = Context.environment
    guard let url = environment["CF_ACCESS_TCP_PACKAGE_URL"] else {
        return .package(name: "cf-access-tcp", path: "../..")
    }
    let version = environment["CF_ACCESS_TCP_PACKAGE_VERSION"].flatMap { Version($0) } ?? "0.1.0"
    return .package(url: url, from: version)
}()

let package = Package(
    name: "NIOSSHExample",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "nio-ssh-example", targets: ["NIOSSHExample"]),
    ],
    dependencies: [
        cfAccessTCP,
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssh", from: "0.15.1"),
    ],
    targets: [
        .executableTarget(
            name: "NIOSSHExample",
            dependencies: [
                .product(name: "CFAccessTCP", package: "cf-access-tcp"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSH", package: "swift-nio-ssh"),
            ]),
    ]
)
