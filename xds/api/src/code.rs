//! gRPC status codes (gRPC's `statuscodes.md`).

/// gRPC status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// The operation was cancelled.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client sent an invalid argument.
    InvalidArgument = 3,
    /// The deadline passed.
    DeadlineExceeded = 4,
    /// Not found.
    NotFound = 5,
    /// Already exists.
    AlreadyExists = 6,
    /// The caller may not do this.
    PermissionDenied = 7,
    /// Out of a resource (a size limit, a quota).
    ResourceExhausted = 8,
    /// The system is not in a state for this.
    FailedPrecondition = 9,
    /// Aborted.
    Aborted = 10,
    /// Out of range.
    OutOfRange = 11,
    /// Not implemented or not supported.
    Unimplemented = 12,
    /// Internal error.
    Internal = 13,
    /// Unavailable; retry.
    Unavailable = 14,
    /// Data loss.
    DataLoss = 15,
    /// Not authenticated.
    Unauthenticated = 16,
}
