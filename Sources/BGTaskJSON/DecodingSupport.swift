// Keeps the coding path when a decoder other than the codec's (Foundation's JSONDecoder, in a client or a test)
// rejects a number while it decodes a `JSONValue`.
//
// Foundation's JSONDecoder reports a number that does not fit the requested type (`1e400` for a `Double`) by
// throwing an internal, non-`DecodingError` error; this turns it into a `DecodingError` at its path.

/// Decodes a number from a single-value container, naming `codingPath` when it does not fit `T`.
func decodeNumber<T: Decodable>(
    _ type: T.Type,
    in container: any SingleValueDecodingContainer,
    codingPath: [any CodingKey]
) throws -> T {
    do {
        return try container.decode(type)
    } catch let error as DecodingError {
        throw error
    } catch {
        throw unrepresentableNumber(at: codingPath, underlying: error)
    }
}

/// The `DecodingError` for a number that parsed as JSON but does not fit the Swift type asked for.
private func unrepresentableNumber(at codingPath: [any CodingKey], underlying: any Error) -> DecodingError {
    DecodingError.dataCorrupted(
        DecodingError.Context(
            codingPath: codingPath,
            debugDescription: "number does not fit the expected type",
            underlyingError: underlying
        )
    )
}
