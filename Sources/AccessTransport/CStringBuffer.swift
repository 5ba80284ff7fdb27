extension String {
    /// Decodes a NUL-terminated C buffer (UTF-8, invalid bytes repaired), stopping at the first NUL.
    init(nulTerminated buffer: [CChar]) {
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        self.init(decoding: bytes, as: UTF8.self)
    }
}
