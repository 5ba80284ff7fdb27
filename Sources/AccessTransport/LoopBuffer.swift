internal import CCFOpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// What holds bytes in a `LoopBuffer`: it can move them to a queue of its own.
protocol LoopBufferTenant: AnyObject {
    /// Moves this tenant's bytes out of the buffer (into its own queue) and releases it.
    func park()
}

/// A buffer of one carrier loop, lent to one bridge at a time (the loop's bridges run one after
/// another on its thread): the bytes between `start` and `end` belong to `owner`. A bridge that
/// needs the buffer while another owns bytes in it first moves them to that bridge's own queue
/// (`claim`).
final class LoopBuffer {
    let bytes: UnsafeMutableRawPointer
    let capacity: Int
    var start = 0
    var end = 0
    /// Whose bytes are in the buffer (nil: none).
    private(set) var owner: (any LoopBufferTenant)?

    init(capacity: Int) {
        self.capacity = capacity
        bytes = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { bytes.deallocate() }

    /// The bytes `object` has here (none unless it is the owner).
    func count(of object: AnyObject) -> Int { owner === object ? end - start : 0 }

    /// `object`'s bytes here, as a buffer.
    func held(by object: AnyObject) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: bytes + start, count: count(of: object))
    }

    /// Makes `tenant` the owner, the previous owner's bytes parked first; an empty buffer's start
    /// and end are 0.
    func claim(for tenant: any LoopBufferTenant) {
        guard owner !== tenant else { return }
        owner?.park()
        owner = tenant
    }

    /// Empties the buffer if `object` owns it.
    func release(from object: AnyObject) {
        guard owner === object else { return }
        start = 0
        end = 0
        owner = nil
    }
}

/// The BIOs of ours that stand between OpenSSL and a bridge's socket (`CipherSink`,
/// `RecordSource`): each holds its object unretained; the bridge keeps the object longer than its
/// `SSL`.
enum CarrierBIO {
    /// A BIO method named `name` (its type index from OpenSSL's counter), set up by `configure`;
    /// nil if OpenSSL refused.
    static func method(named name: String, _ configure: (OpaquePointer) -> Void) -> OpaquePointer? {
        let index = BIO_get_new_index()
        guard index > 0, let method = BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, name) else { return nil }
        configure(method)
        return method
    }

    /// A new BIO of `method` that serves `object`; nil if OpenSSL refused.
    static func make(_ method: OpaquePointer?, serving object: AnyObject) -> OpaquePointer? {
        guard let method, let bio = BIO_new(method) else { return nil }
        BIO_set_data(bio, Unmanaged.passUnretained(object).toOpaque())
        BIO_set_init(bio, 1)
        return bio
    }

    /// The object a BIO of ours serves, its retry flags cleared for the call in progress.
    static func object<T: AnyObject>(of bio: OpaquePointer?, as type: T.Type) -> T? {
        guard let bio, let raw = BIO_get_data(bio) else { return nil }
        BIO_clear_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY)
        return Unmanaged<T>.fromOpaque(raw).takeUnretainedValue()
    }
}
