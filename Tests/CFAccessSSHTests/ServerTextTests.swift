import CFAccessSSH
import Testing

/// Server text made visible-safe (issue 16 point 2): every byte that could drive a terminal is
/// an octal escape, readable UTF-8 stays readable.
@Suite("Server text is visible-safe")
struct ServerTextTests {
    @Test("escape sequences, controls and DEL become octal escapes: no ESC, BEL, CR or C1 byte survives")
    func controls() {
        let hostile = "\u{1B}]0;pwned\u{07}\u{1B}[2J\u{1B}[31mred\rback\u{08}\u{7F}\u{9B}31m"
        let shown = ServerText.visible(hostile)
        #expect(shown == "\\033]0;pwned\\007\\033[2J\\033[31mred\\015back\\010\\177\\302\\23331m")
        #expect(!shown.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
    }

    @Test("UTF-8 text stays readable: accents, CJK, emoji with joiners, tabs; newlines only where asked")
    func readable() {
        #expect(ServerText.visible("Mot de passe (é) 日本語 👩‍💻\tok") == "Mot de passe (é) 日本語 👩‍💻\tok")
        #expect(ServerText.visible("line one\nline two") == "line one\\012line two")
        #expect(ServerText.visible("line one\nline two", newlines: true) == "line one\nline two")
    }

    @Test("bidirectional overrides and other invisible format characters are shown, not obeyed")
    func invisibles() {
        #expect(ServerText.visible("abc\u{202E}fed") == "abc\\342\\200\\256fed")
        #expect(ServerText.visible("a\u{2028}b") == "a\\342\\200\\250b")
        #expect(ServerText.visible("x\u{FEFF}y") == "x\\357\\273\\277y")
    }

    @Test("bytes that are not UTF-8 (stray, overlong, surrogates, truncated) are escaped one by one")
    func notUTF8() {
        #expect(ServerText.visible([0x41, 0xFF, 0x42]) == "A\\377B")
        #expect(ServerText.visible([0xC0, 0xAF]) == "\\300\\257")              // overlong "/"
        #expect(ServerText.visible([0xED, 0xA0, 0x80]) == "\\355\\240\\200")   // a surrogate
        #expect(ServerText.visible([0x61, 0xE6, 0x97]) == "a\\346\\227")        // cut short
    }

    @Test("a backslash is doubled, so an escape cannot be forged; long text is cut and says so")
    func backslashAndLimit() {
        #expect(ServerText.visible("C:\\033") == "C:\\\\033")
        #expect(ServerText.visible(String(repeating: "a", count: 20), limit: 8) == "aaaaaaaa…[12 more bytes]")
    }
}
