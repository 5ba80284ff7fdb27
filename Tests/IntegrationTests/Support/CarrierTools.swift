import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension EdgeFixture {
    /// `POST /cdn-cgi/edge/admin/<path>` on this emulator as `host`; returns the body.
    @discardableResult
    func admin(_ path: String, host: String = testHost) throws -> String {
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let arguments = ["-sS", "--fail-with-body", "--max-time", "10", "-X", "POST"] + curlArguments(host: host)
            + ["\(url(host: host))/cdn-cgi/edge/admin/\(path)"]
        let result = try run(URL(fileURLWithPath: curl!), arguments, timeout: 20)
        guard result.status == 0 else {
            throw FixtureError("admin \(path) failed (\(result.status)): \(result.stdout) \(result.stderr)")
        }
        return result.stdout
    }
}
