// The contained systemd manager, shared with `bgtask-soak --systemd`, is part of what the tests get from here.

@_exported import BGTaskContainedSystemd
// So is the seeded generator the soak's schedule uses.
@_exported import BGTaskSeededRandom
