/// File path text, as NSString's path methods did it before the shipped modules dropped
/// Foundation (issue 18.3): repeated slashes are one, a trailing slash is dropped, no `~`
/// expansion, no file system access.
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

    /// The directory part: "/a/b/c" → "/a/b", "/a" → "/", "a" → "", "a/b/" → "a".
    package static func deletingLastComponent(_ path: String) -> String {
        let clean = normalized(path)
        guard let slash = clean.lastIndex(of: "/") else { return "" }
        if slash == clean.startIndex { return "/" }
        return String(clean[..<slash])
    }

    /// `component` inside `directory`: "dir" + "f" → "dir/f", "dir/" + "f" → "dir/f",
    /// "" + "f" → "f".
    package static func appending(_ component: String, to directory: String) -> String {
        directory.isEmpty ? normalized(component) : normalized(directory + "/" + component)
    }
}
