extension Duration {
    /// Whole seconds, a fraction counted as one more (never below zero): what the carrier's and
    /// libcurl's second-granular settings take.
    package var wholeSecondsRoundedUp: Int {
        let (seconds, attoseconds) = components
        return Int(max(0, attoseconds > 0 ? seconds + 1 : seconds))
    }

    /// The duration in seconds, as a floating-point number.
    package var secondsValue: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
