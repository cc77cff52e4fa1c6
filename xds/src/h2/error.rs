//! HTTP/2 error codes (RFC 9113 §7) and protocol errors that know their
//! scope: a stream error resets one stream (RST_STREAM), a connection error
//! ends the connection (GOAWAY).

use std::fmt;

/// Error codes (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Reason {
    /// Graceful shutdown or no error.
    NoError = 0x0,
    /// Unspecific protocol violation.
    ProtocolError = 0x1,
    /// Unexpected internal error.
    InternalError = 0x2,
    /// Flow-control limits violated.
    FlowControlError = 0x3,
    /// SETTINGS not acknowledged in time.
    SettingsTimeout = 0x4,
    /// Frame on a half-closed stream.
    StreamClosed = 0x5,
    /// Frame of invalid size.
    FrameSizeError = 0x6,
    /// Stream refused before any processing.
    RefusedStream = 0x7,
    /// Stream no longer needed.
    Cancel = 0x8,
    /// HPACK state could not be maintained.
    CompressionError = 0x9,
    /// CONNECT tunnel reset.
    ConnectError = 0xa,
    /// The peer is behaving in a way that might generate excessive load.
    EnhanceYourCalm = 0xb,
    /// Transport security too weak.
    InadequateSecurity = 0xc,
    /// HTTP/1.1 required.
    Http11Required = 0xd,
}

impl Reason {
    /// The code on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The name RFC 9113 gives the code, for logs; unknown codes are
    /// `UNKNOWN`.
    pub fn name_of(code: u32) -> &'static str {
        match code {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::name_of(self.code()))
    }
}

/// A protocol violation by the peer, with its scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Reset the stream; the connection goes on.
    #[error("stream {stream}: {reason}: {msg}")]
    Stream {
        /// The stream.
        stream: u32,
        /// Code sent in RST_STREAM.
        reason: Reason,
        /// What was wrong.
        msg: &'static str,
    },
    /// Send GOAWAY and close the connection.
    #[error("connection: {reason}: {msg}")]
    Connection {
        /// Code sent in GOAWAY.
        reason: Reason,
        /// What was wrong (also sent as GOAWAY debug data).
        msg: &'static str,
    },
}
