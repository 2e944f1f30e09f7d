// The process's environment as a dictionary, read from `environ`: what Foundation's `ProcessInfo` gave.
import Glibc

/// The environment variables of this process.
public enum ProcessEnvironment {
    /// Every variable, by name; of a name set twice, the first (as `getenv` returns).
    public static func current() -> [String: String] {
        var variables: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                let name = String(text[..<equals])
                if variables[name] == nil { variables[name] = String(text[text.index(after: equals)...]) }
            }
            entry += 1
        }
        return variables
    }
}
