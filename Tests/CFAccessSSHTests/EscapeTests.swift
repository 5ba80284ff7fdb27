import CFAccessSSH
import Testing

/// OpenSSH's escape sequences (``SSHEscapes``): a pure state machine over typed bytes.
@Suite("Escape sequences on the keyboard input")
struct EscapeTests {
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("~. at the start disconnects; after a newline too; the rest of the input is dropped")
    func disconnect() {
        var start = SSHEscapes()
        #expect(start.scan(bytes("~.")) == [.disconnect])
        var afterLine = SSHEscapes()
        #expect(afterLine.scan(bytes("ls\n~.rm -rf\n")) == [.send(bytes("ls\n")), .disconnect])
        var afterReturn = SSHEscapes()
        #expect(afterReturn.scan(bytes("ls\r~.")) == [.send(bytes("ls\r")), .disconnect])
    }

    @Test("not after a newline, ~ is an ordinary character")
    func midLine() {
        var escapes = SSHEscapes()
        #expect(escapes.scan(bytes("echo a~.b\n")) == [.send(bytes("echo a~.b\n"))])
        #expect(escapes.atLineStart)
        #expect(escapes.scan(bytes("x~?")) == [.send(bytes("x~?"))])
        #expect(!escapes.atLineStart)
    }

    @Test("~~ sends one ~ and ends the line start; ~ and another character send both")
    func literalTilde() {
        var escapes = SSHEscapes()
        #expect(escapes.scan(bytes("~~x")) == [.send(bytes("~x"))])
        #expect(!escapes.atLineStart)
        #expect(escapes.scan(bytes("\n~~.")) == [.send(bytes("\n~."))], "after ~~ the line has begun: ~. is text")
        var other = SSHEscapes()
        #expect(other.scan(bytes("~a")) == [.send(bytes("~a"))])
        var newline = SSHEscapes()
        #expect(newline.scan(bytes("~\n~.")) == [.send(bytes("~\n")), .disconnect], "~ then Enter sends both; a new line begins")
    }

    @Test("~? asks for the help and stays at the line start, so ~. can follow")
    func help() {
        var escapes = SSHEscapes()
        #expect(escapes.scan(bytes("~?~.")) == [.help, .disconnect])
        var between = SSHEscapes()
        #expect(between.scan(bytes("a\n~?b")) == [.send(bytes("a\n")), .help, .send(bytes("b"))])
        let text = SSHEscapes().helpText
        #expect(text.hasPrefix("Supported escape sequences:\r\n"))
        for line in [" ~.   - terminate connection\r\n", " ~?   - this message\r\n",
                     " ~~   - send the escape character by typing it twice\r\n",
                     "(Note that escapes are only recognized immediately after newline.)\r\n"] {
            #expect(text.contains(line), "\(line)")
        }
    }

    @Test("a sequence split between two reads is still recognised")
    func acrossReads() {
        var escapes = SSHEscapes()
        #expect(escapes.scan(bytes("pwd\n~")) == [.send(bytes("pwd\n"))])
        #expect(escapes.pending)
        #expect(escapes.scan(bytes(".")) == [.disconnect])
        var tilde = SSHEscapes()
        #expect(tilde.scan(bytes("~")) == [])
        #expect(tilde.scan(bytes("~")) == [.send(bytes("~"))])
        #expect(tilde.scan([]) == [])
    }

    @Test("another escape character works the same way")
    func otherCharacter() {
        var escapes = SSHEscapes(escapeCharacter: UInt8(ascii: "%"))
        #expect(escapes.scan(bytes("~.\n%?%%\n%.")) == [.send(bytes("~.\n")), .help, .send(bytes("%\n")), .disconnect])
        #expect(SSHEscapes(escapeCharacter: UInt8(ascii: "%")).helpText.contains(" %.   - terminate connection"))
    }
}
