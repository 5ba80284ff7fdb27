/// File path text, as NSString's path methods did it before the shipped modules dropped
/// Foundation (issue 18.3): no `~` expansion, no file system access.
package enum PathText {
    /// `path` with repeated slashes collapsed and without a trailing slash (except "/" itself).
    package static func normalized(_ path: String) -> String {
        var out = ""
        var previousSlash = false
        for character in path {
            if character == "/" {
                if previousSlash { continue }
                previousSlash = true
            } else {
                previousSlash = false
            }
            out.append(character)
        }
        if out.count > 1 && out.hasSuffix("/") { out.removeLast() }
        return out
    }

    /// The directory part, with repeated slashes as one: "/a/b/c" → "/a/b", "/a" → "/",
    /// "a/b/" → "a", "a" → "" (where Foundation's `deletingLastPathComponent` crashed).
    package static func deletingLastComponent(_ path: String) -> String {
        let clean = normalized(path)
        guard let slash = clean.lastIndex(of: "/") else { return "" }
        if slash == clean.startIndex { return "/" }
        return String(clean[..<slash])
    }

    /// `component` inside `directory`, the rest left as written: "dir" + "f" → "dir/f",
    /// "dir/" + "f" → "dir/f", "" + "f" → "f".
    package static func appending(_ component: String, to directory: String) -> String {
        if directory.isEmpty { return component }
        return directory.hasSuffix("/") ? directory + component : directory + "/" + component
    }
}
