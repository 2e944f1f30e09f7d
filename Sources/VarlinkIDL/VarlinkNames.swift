// The Varlink grammar of interface and member names, shared by the IDL parser and the codec.

/// The names of the Varlink grammar (varlink.org): interfaces such as `io.bgtask.Lifecycle`, members such as
/// `Register`.
public enum VarlinkNames {
    /// Whether `name` is an interface name: `[A-Za-z]([-]*[A-Za-z0-9])*([.][A-Za-z0-9]([-]*[A-Za-z0-9])*)+`.
    public static func isValidInterfaceName(_ name: some Collection<UInt8>) -> Bool {
        var labels = 0
        var labelLength = 0
        var previous: UInt8 = UInt8(ascii: ".")
        for byte in name {
            switch byte {
            case UInt8(ascii: "."):
                if labelLength == 0 || previous == UInt8(ascii: "-") { return false }
                labels += 1
                labelLength = 0
            case UInt8(ascii: "-"):
                if labelLength == 0 { return false }
                labelLength += 1
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if labels == 0 && labelLength == 0 { return false }
                labelLength += 1
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
                labelLength += 1
            default:
                return false
            }
            previous = byte
        }
        if labelLength == 0 || previous == UInt8(ascii: "-") { return false }
        return labels + 1 >= 2
    }

    /// Whether `name` is a member (method, type or error) name: `[A-Z][A-Za-z0-9]*`.
    public static func isValidMemberName(_ name: some Collection<UInt8>) -> Bool {
        guard let first = name.first, (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first) else { return false }
        return name.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "A")...UInt8(ascii: "Z"):
                true
            default: false
            }
        }
    }
}
