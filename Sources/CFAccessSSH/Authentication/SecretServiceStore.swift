import AccessTransport
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Saved SSH passwords in the system keyring through the Secret Service API (libsecret; GNOME
/// Keyring, KeePassXC, KWallet…), keyed to `user@host:port`. Never a file of ours. The ready
/// ``SSHPasswordStore``.
///
/// libsecret (`libsecret-1.so.0`, Debian `libsecret-1-0`) is loaded with `dlopen` the first time
/// a password is looked up, saved or removed, the way libcurl is for logins: a session that never
/// needs a password does not load it, nor GLib and D-Bus behind it. If it cannot be loaded, or no
/// Secret Service answers, each call throws ``SSHPasswordStoreFailure`` saying why.
///
/// libsecret's calls block with no limit of their own (a session bus that accepts and never
/// answers hangs them), so each call runs on a queue of the store's own and is awaited at most
/// ``timeout``; after a call that did not finish in time the store is given up for the process
/// (every later call fails at once, ``SSHPasswordStoreFailure/timedOut``).
public final class SecretServiceStore: SSHPasswordStore {
    /// The schema name the passwords are stored under.
    public static let schemaName = "com.cf-access-tcp.ssh-password"

    /// How long a call may take before it is given up.
    public let timeout: Duration
    private let library = LockedBox<Result<SecretServiceLibrary, SSHPasswordStoreFailure>?>(nil)
    private let hung = LockedBox<SSHPasswordStoreFailure?>(nil)
    private let queue = DispatchQueue(label: "cf-access-ssh.secret-service")

    /// A store that loads libsecret on first use and gives each call at most `timeout`.
    public init(timeout: Duration = .seconds(10)) {
        self.timeout = timeout
    }

    /// The saved password for `account`, or nil.
    public func password(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> String? {
        try await call("looking up the password") { store throws(SSHPasswordStoreFailure) in
            try store.loaded().password(user: account.user, host: account.host, port: account.port)
        }
    }

    /// Saves `password` for `account` (replacing any saved one).
    public func save(_ password: String, for account: SSHAccount) async throws(SSHPasswordStoreFailure) {
        try await call("saving the password") { store throws(SSHPasswordStoreFailure) in
            try store.loaded().save(password, user: account.user, host: account.host, port: account.port)
        }
    }

    /// Removes the saved password for `account`; returns whether one was there.
    @discardableResult
    public func remove(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> Bool {
        try await call("removing the password") { store throws(SSHPasswordStoreFailure) in
            try store.loaded().remove(user: account.user, host: account.host, port: account.port)
        }
    }

    /// Runs `body` on the store's queue, bounded by `timeout`.
    private func call<T: Sendable>(_ what: String,
                                   _ body: @escaping @Sendable (SecretServiceStore) throws(SSHPasswordStoreFailure) -> T)
    async throws(SSHPasswordStoreFailure) -> T {
        if let hung = hung.withLock({ $0 }) { throw hung }
        let result = await bounded(on: queue, timeout: timeout) { [self] () -> Result<T, SSHPasswordStoreFailure> in
            do throws(SSHPasswordStoreFailure) { return .success(try body(self)) } catch { return .failure(error) }
        }
        guard let result else {
            let seconds = Int(timeout.seconds.rounded(.up))
            let failure = SSHPasswordStoreFailure(
                reason: "the Secret Service (D-Bus) did not answer within \(seconds) s while \(what)", timedOut: true)
            hung.withLock { $0 = failure }
            throw failure
        }
        return try result.get()
    }

    /// libsecret, loaded (and a Secret Service found) on the first call; the same answer after.
    private func loaded() throws(SSHPasswordStoreFailure) -> SecretServiceLibrary {
        try library.withLock { state throws(SSHPasswordStoreFailure) -> SecretServiceLibrary in
            if let known = state { return try known.get() }
            let result: Result<SecretServiceLibrary, SSHPasswordStoreFailure>
            do throws(SSHPasswordStoreFailure) {
                result = .success(try SecretServiceLibrary(schemaName: Self.schemaName))
            } catch {
                result = .failure(error)
            }
            state = result
            return try result.get()
        }
    }
}

/// libsecret's functions, found with `dlsym`, and the schema; calls are serialised.
private final class SecretServiceLibrary: @unchecked Sendable {
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

    /// Loads libsecret and checks that a Secret Service answers on the session bus.
    init(schemaName: String) throws(SSHPasswordStoreFailure) {
        guard ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"].map({ !$0.isEmpty }) ?? false
                || FileManager.default.fileExists(atPath: "/run/user/\(getuid())/bus") else {
            throw SSHPasswordStoreFailure(reason: "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set), so no Secret Service")
        }
        guard let library = dlopen("libsecret-1.so.0", RTLD_NOW | RTLD_LOCAL) else {
            throw SSHPasswordStoreFailure(reason: "libsecret-1.so.0 is not installed (Debian package libsecret-1-0)")
        }
        func symbol<T>(_ name: String, _ type: T.Type) throws(SSHPasswordStoreFailure) -> T {
            guard let pointer = dlsym(library, name) else {
                throw SSHPasswordStoreFailure(reason: "libsecret-1.so.0 lacks \(name)")
            }
            return unsafeBitCast(pointer, to: type)
        }
        guard let strHash = dlsym(library, "g_str_hash"), let strEqual = dlsym(library, "g_str_equal") else {
            throw SSHPasswordStoreFailure(reason: "libsecret-1.so.0 came without GLib")
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
        schema.storeBytes(of: UnsafeRawPointer(strdup(schemaName)!), toByteOffset: 0, as: UnsafeRawPointer.self)
        schema.storeBytes(of: Int32(0), toByteOffset: 8, as: Int32.self)   // SECRET_SCHEMA_NONE
        for (index, name) in ["user", "host", "port"].enumerated() {
            schema.storeBytes(of: UnsafeRawPointer(strdup(name)!), toByteOffset: 16 + 16 * index, as: UnsafeRawPointer.self)
            schema.storeBytes(of: Int32(0), toByteOffset: 24 + 16 * index, as: Int32.self)   // STRING
        }
        // A lookup proves a Secret Service answers (an empty result is fine).
        _ = try password(user: "", host: "", port: 0)
    }

    /// The saved password for `user@host:port`, or nil.
    func password(user: String, host: String, port: Int) throws(SSHPasswordStoreFailure) -> String? {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(SSHPasswordStoreFailure) in
            let found = lookup(schema, attributes, nil, error)
            try check(error, "looking up a password")
            guard let found else { return nil }
            defer { passwordFree(found) }
            return String(cString: found)
        }
    }

    /// Saves `password` for `user@host:port` (replacing any saved one).
    func save(_ password: String, user: String, host: String, port: Int) throws(SSHPasswordStoreFailure) {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(SSHPasswordStoreFailure) in
            let label = "cf-access-tcp SSH password for \(user)@\(host):\(port)"
            let ok = store(schema, attributes, nil, label, password, nil, error)
            try check(error, "saving the password")
            guard ok != 0 else { throw SSHPasswordStoreFailure(reason: "the Secret Service did not save the password") }
        }
    }

    /// Removes the saved password for `user@host:port`; returns whether one was there.
    func remove(user: String, host: String, port: Int) throws(SSHPasswordStoreFailure) -> Bool {
        try withAttributes(user: user, host: host, port: port) { attributes, error throws(SSHPasswordStoreFailure) in
            let removed = clear(schema, attributes, nil, error)
            try check(error, "removing the password")
            return removed != 0
        }
    }

    private func withAttributes<T>(
        user: String, host: String, port: Int,
        _ body: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) throws(SSHPasswordStoreFailure) -> T
    ) throws(SSHPasswordStoreFailure) -> T {
        try lock.withLock { _ throws(SSHPasswordStoreFailure) -> T in try withAttributesLocked(user: user, host: host, port: port, body) }
    }

    private func withAttributesLocked<T>(
        user: String, host: String, port: Int,
        _ body: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) throws(SSHPasswordStoreFailure) -> T
    ) throws(SSHPasswordStoreFailure) -> T {
        guard let table = hashTableNew(strHash, strEqual) else {
            throw SSHPasswordStoreFailure(reason: "GLib could not allocate a hash table")
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
    private func check(_ error: UnsafeMutablePointer<UnsafeMutableRawPointer?>, _ what: String) throws(SSHPasswordStoreFailure) {
        guard let raised = error.pointee else { return }
        defer { errorFree(raised); error.pointee = nil }
        let message = raised.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? "unknown error"
        throw SSHPasswordStoreFailure(reason: "the Secret Service failed \(what): \(message)")
    }
}
