import AccessTransport
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Saved SSH passwords in the system keyring through the Secret Service API (libsecret; GNOME
/// Keyring, KeePassXC, KWallet…), keyed to `user@host:port`. Never a file of ours.
///
/// libsecret (`libsecret-1.so.0`, Debian `libsecret-1-0`) is loaded with `dlopen` the first time
/// a password is looked up or saved, the way libcurl is for logins: a tunnel that never asks
/// for a password does not load it, nor GLib and D-Bus behind it.
public final class SecretServiceStore: @unchecked Sendable {
    /// Why the Secret Service cannot be used, in one line for people.
    public struct Unavailable: Error, Sendable, Equatable, CustomStringConvertible {
        /// The reason, e.g. "libsecret-1.so.0 is not installed".
        public let reason: String
        /// The ``reason``.
        public var description: String { reason }
    }

    private typealias HashFunction = @convention(c) (UnsafeRawPointer?) -> UInt32
    private typealias HashTableNew = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> OpaquePointer?
    private typealias HashTableInsert = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32
    private typealias HashTableUnref = @convention(c) (OpaquePointer?) -> Void
    private typealias ErrorFree = @convention(c) (UnsafeMutableRawPointer?) -> Void
    private typealias Store = @convention(c) (UnsafeRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
                                              UnsafePointer<CChar>?, OpaquePointer?,
                                              UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32
    private typealias Lookup = @convention(c) (UnsafeRawPointer?, OpaquePointer?, OpaquePointer?,
                                               UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> UnsafeMutablePointer<CChar>?
    private typealias Clear = @convention(c) (UnsafeRawPointer?, OpaquePointer?, OpaquePointer?,
                                              UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32
    private typealias PasswordFree = @convention(c) (UnsafeMutablePointer<CChar>?) -> Void

    private let strHash: UnsafeMutableRawPointer
    private let strEqual: UnsafeMutableRawPointer
    private let hashTableNew: HashTableNew
    private let hashTableInsert: HashTableInsert
    private let hashTableUnref: HashTableUnref
    private let errorFree: ErrorFree
    private let store: Store
    private let lookup: Lookup
    private let clear: Clear
    private let passwordFree: PasswordFree
    /// libsecret's SecretSchema, laid out by hand (name, flags, 32 attributes, reserved).
    private let schema: UnsafeMutableRawPointer
    private let lock = LockedBox(())

    /// The schema name the passwords are stored under.
    public static let schemaName = "com.cf-access-tcp.ssh-password"

    /// Loads libsecret and checks that a Secret Service answers on the session bus.
    public init() throws(Unavailable) {
        guard ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"].map({ !$0.isEmpty }) ?? false
                || FileManager.default.fileExists(atPath: "/run/user/\(getuid())/bus") else {
            throw Unavailable(reason: "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set), so no Secret Service")
        }
        guard let library = dlopen("libsecret-1.so.0", RTLD_NOW | RTLD_LOCAL) else {
            throw Unavailable(reason: "libsecret-1.so.0 is not installed (Debian package libsecret-1-0)")
        }
        func symbol<T>(_ name: String, _ type: T.Type) throws(Unavailable) -> T {
            guard let pointer = dlsym(library, name) else {
                throw Unavailable(reason: "libsecret-1.so.0 lacks \(name)")
            }
            return unsafeBitCast(pointer, to: type)
        }
        guard let strHash = dlsym(library, "g_str_hash"), let strEqual = dlsym(library, "g_str_equal") else {
            throw Unavailable(reason: "libsecret-1.so.0 came without GLib")
        }
        self.strHash = strHash
        self.strEqual = strEqual
        hashTableNew = try symbol("g_hash_table_new", HashTableNew.self)
        hashTableInsert = try symbol("g_hash_table_insert", HashTableInsert.self)
        hashTableUnref = try symbol("g_hash_table_unref", HashTableUnref.self)
        errorFree = try symbol("g_error_free", ErrorFree.self)
        store = try symbol("secret_password_storev_sync", Store.self)
        lookup = try symbol("secret_password_lookupv_sync", Lookup.self)
        clear = try symbol("secret_password_clearv_sync", Clear.self)
        passwordFree = try symbol("secret_password_free", PasswordFree.self)

        // struct SecretSchema { const gchar *name; SecretSchemaFlags flags;
        //   SecretSchemaAttribute attributes[32] /* {const gchar *name; type} */; gint reserved;
        //   gpointer reserved1…7; } — 592 bytes on LP64.
        schema = calloc(1, 592)!
        schema.storeBytes(of: UnsafeRawPointer(strdup(Self.schemaName)!), toByteOffset: 0, as: UnsafeRawPointer.self)
        schema.storeBytes(of: Int32(0), toByteOffset: 8, as: Int32.self)   // SECRET_SCHEMA_NONE
        for (index, name) in ["user", "host", "port"].enumerated() {
            schema.storeBytes(of: UnsafeRawPointer(strdup(name)!), toByteOffset: 16 + 16 * index, as: UnsafeRawPointer.self)
            schema.storeBytes(of: Int32(0), toByteOffset: 24 + 16 * index, as: Int32.self)   // STRING
        }
        // A lookup proves a Secret Service answers (an empty result is fine).
        _ = try password(user: "", host: "", port: 0)
    }

    /// The saved password for `user@host:port`, or nil.
    public func password(user: String, host: String, port: Int) throws(Unavailable) -> String? {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(Unavailable) in
            let found = lookup(schema, attributes, nil, error)
            try check(error, "looking up a password")
            guard let found else { return nil }
            defer { passwordFree(found) }
            return String(cString: found)
        }
    }

    /// Saves `password` for `user@host:port` (replacing any saved one).
    public func save(_ password: String, user: String, host: String, port: Int) throws(Unavailable) {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(Unavailable) in
            let label = "cf-access-tcp SSH password for \(user)@\(host):\(port)"
            let ok = store(schema, attributes, nil, label, password, nil, error)
            try check(error, "saving the password")
            guard ok != 0 else { throw Unavailable(reason: "the Secret Service did not save the password") }
        }
    }

    /// Removes the saved password for `user@host:port`; returns whether one was there.
    @discardableResult
    public func remove(user: String, host: String, port: Int) throws(Unavailable) -> Bool {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(Unavailable) in
            let removed = clear(schema, attributes, nil, error)
            try check(error, "removing the password")
            return removed != 0
        }
    }

    private func withAttributes<T>(
        user: String, host: String, port: Int,
        _ body: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) throws(Unavailable) -> T
    ) throws(Unavailable) -> T {
        try lock.withLock { _ throws(Unavailable) -> T in try withAttributesLocked(user: user, host: host, port: port, body) }
    }

    private func withAttributesLocked<T>(
        user: String, host: String, port: Int,
        _ body: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) throws(Unavailable) -> T
    ) throws(Unavailable) -> T {
        guard let table = hashTableNew(strHash, strEqual) else {
            throw Unavailable(reason: "GLib could not allocate a hash table")
        }
        var owned: [UnsafeMutablePointer<CChar>] = []
        defer {
            hashTableUnref(table)
            owned.forEach { free($0) }
        }
        for (key, value) in [("user", user), ("host", host.lowercased()), ("port", String(port))] {
            let k = strdup(key)!, v = strdup(value)!
            owned += [k, v]
            _ = hashTableInsert(table, k, v)
        }
        var error: UnsafeMutableRawPointer?
        return try body(table, &error)
    }

    /// Throws the GError in `error`, if any (GError: GQuark domain; gint code; gchar *message).
    private func check(_ error: UnsafeMutablePointer<UnsafeMutableRawPointer?>, _ what: String) throws(Unavailable) {
        guard let raised = error.pointee else { return }
        defer { errorFree(raised); error.pointee = nil }
        let message = raised.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? "unknown error"
        throw Unavailable(reason: "the Secret Service failed \(what): \(message)")
    }
}
