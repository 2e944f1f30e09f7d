// Decoding helpers that keep the coding path when Foundation's JSONDecoder rejects a number.
//
// Foundation's JSONDecoder reports a number that does not fit the requested type (`1.5` or `1e30` for an `Int`,
// `1e400` for a `Double`) by throwing an internal, non-`DecodingError` error; at the top it becomes "not valid
// JSON" with an empty coding path, which would hide the parameter at fault. These helpers catch it where the key
// is still known and throw a `DecodingError` that names the key.

extension KeyedDecodingContainer {
    /// Decodes the value for `key`, naming `key` in the error when the value is a number that does not fit `T`.
    func decodeParameter<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        do {
            return try decode(type, forKey: key)
        } catch let error as DecodingError {
            throw error
        } catch {
            throw unrepresentableNumber(at: codingPath + [key], underlying: error)
        }
    }

    /// Decodes the value for `key` when present and not null, with the same error as `decodeParameter`.
    func decodeParameterIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        do {
            return try decodeIfPresent(type, forKey: key)
        } catch let error as DecodingError {
            throw error
        } catch {
            throw unrepresentableNumber(at: codingPath + [key], underlying: error)
        }
    }
}

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
