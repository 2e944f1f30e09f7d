// The C heap's free memory, handed back to the kernel.

import CPOSIX

/// glibc's heap: what the daemon's allocations free stays mapped in its arenas until trimmed.
public enum Heap {
    /// Returns the free memory at the top of every arena, and the free whole pages inside them, to the kernel
    /// (`malloc_trim(0)`): after the work that peaks the heap once and then frees it (parsing a saved state,
    /// encoding a snapshot), so that the resident size follows what is live rather than the peak. True when any
    /// memory was returned.
    @discardableResult
    public static func trim() -> Bool {
        malloc_trim(0) != 0
    }
}
