//! Decode errors carrying what RFC 4271 §6 needs for the NOTIFICATION and the
//! RFC 7606 classification of how to handle them.
use bytes::Bytes;

/// NOTIFICATION error codes (RFC 4271 §4.5, RFC 4486, RFC 7313).
pub mod code {
    /// Message Header Error.
    pub const MESSAGE_HEADER: u8 = 1;
    /// OPEN Message Error.
    pub const OPEN_MESSAGE: u8 = 2;
    /// UPDATE Message Error.
    pub const UPDATE_MESSAGE: u8 = 3;
    /// Hold Timer Expired.
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    /// Finite State Machine Error.
    pub const FSM: u8 = 5;
    /// Cease.
    pub const CEASE: u8 = 6;
}

/// NOTIFICATION error subcodes.
pub mod subcode {
    /// Header: Connection Not Synchronized.
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    /// Header: Bad Message Length.
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    /// Header: Bad Message Type.
    pub const BAD_MESSAGE_TYPE: u8 = 3;
    /// OPEN: Unsupported Version Number.
    pub const UNSUPPORTED_VERSION: u8 = 1;
    /// OPEN: Bad Peer AS.
    pub const BAD_PEER_AS: u8 = 2;
    /// OPEN: Bad BGP Identifier.
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    /// OPEN: Unsupported Optional Parameter.
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    /// OPEN: Unacceptable Hold Time.
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    /// OPEN: Unsupported Capability (RFC 5492).
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
    /// UPDATE: Malformed Attribute List.
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    /// UPDATE: Unrecognized Well-known Attribute.
    pub const UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE: u8 = 2;
    /// UPDATE: Missing Well-known Attribute.
    pub const MISSING_WELL_KNOWN_ATTRIBUTE: u8 = 3;
    /// UPDATE: Attribute Flags Error.
    pub const ATTRIBUTE_FLAGS_ERROR: u8 = 4;
    /// UPDATE: Attribute Length Error.
    pub const ATTRIBUTE_LENGTH_ERROR: u8 = 5;
    /// UPDATE: Invalid ORIGIN Attribute.
    pub const INVALID_ORIGIN: u8 = 6;
    /// UPDATE: Invalid NEXT_HOP Attribute.
    pub const INVALID_NEXT_HOP: u8 = 8;
    /// UPDATE: Optional Attribute Error.
    pub const OPTIONAL_ATTRIBUTE_ERROR: u8 = 9;
    /// UPDATE: Invalid Network Field.
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    /// UPDATE: Malformed AS_PATH.
    pub const MALFORMED_AS_PATH: u8 = 11;
    /// FSM: Receive Unexpected Message in OpenSent State (RFC 6608).
    pub const FSM_UNEXPECTED_IN_OPENSENT: u8 = 1;
    /// FSM: Receive Unexpected Message in OpenConfirm State (RFC 6608).
    pub const FSM_UNEXPECTED_IN_OPENCONFIRM: u8 = 2;
    /// FSM: Receive Unexpected Message in Established State (RFC 6608).
    pub const FSM_UNEXPECTED_IN_ESTABLISHED: u8 = 3;
    /// Cease: Administrative Shutdown (RFC 4486).
    pub const CEASE_ADMIN_SHUTDOWN: u8 = 2;
    /// Cease: Peer De-configured (RFC 4486).
    pub const CEASE_PEER_DECONFIGURED: u8 = 3;
    /// Cease: Administrative Reset (RFC 4486).
    pub const CEASE_ADMIN_RESET: u8 = 4;
    /// Cease: Other Configuration Change (RFC 4486).
    pub const CEASE_OTHER_CONFIG_CHANGE: u8 = 6;
    /// Cease: Connection Collision Resolution (RFC 4486).
    pub const CEASE_CONNECTION_COLLISION: u8 = 7;
}

/// How the receiver must handle a malformed message (RFC 7606 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorAction {
    /// Drop the malformed attribute and process the rest of the UPDATE.
    AttributeDiscard,
    /// Treat every prefix of the UPDATE as withdrawn; keep the session.
    TreatAsWithdraw,
    /// Send the NOTIFICATION and reset the session (RFC 4271 §6).
    SessionReset,
}

/// A message that could not be decoded, with the NOTIFICATION it calls for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{reason} (NOTIFICATION {code}/{subcode}, {action:?})")]
pub struct DecodeError {
    /// NOTIFICATION error code (RFC 4271 §4.5).
    pub code: u8,
    /// NOTIFICATION error subcode.
    pub subcode: u8,
    /// NOTIFICATION data field (RFC 4271 §6 says what goes here per error).
    pub data: Bytes,
    /// RFC 7606 handling.
    pub action: ErrorAction,
    /// Human-readable cause, for logs.
    pub reason: &'static str,
}

impl DecodeError {
    /// An error that resets the session.
    pub fn reset(code: u8, subcode: u8, data: impl Into<Bytes>, reason: &'static str) -> Self {
        Self { code, subcode, data: data.into(), action: ErrorAction::SessionReset, reason }
    }

    /// An UPDATE error handled as treat-as-withdraw (RFC 7606 §2).
    pub fn withdraw(subcode: u8, data: impl Into<Bytes>, reason: &'static str) -> Self {
        Self {
            code: code::UPDATE_MESSAGE,
            subcode,
            data: data.into(),
            action: ErrorAction::TreatAsWithdraw,
            reason,
        }
    }

    /// An UPDATE error handled as attribute-discard (RFC 7606 §2).
    pub fn discard(subcode: u8, data: impl Into<Bytes>, reason: &'static str) -> Self {
        Self {
            code: code::UPDATE_MESSAGE,
            subcode,
            data: data.into(),
            action: ErrorAction::AttributeDiscard,
            reason,
        }
    }

    /// The same error handled with a different RFC 7606 approach.
    pub fn handled_as(self, action: ErrorAction) -> Self {
        Self { action, ..self }
    }
}
