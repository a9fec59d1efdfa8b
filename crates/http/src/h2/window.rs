//! Flow-control windows (RFC 9113 §6.9): how many bytes of DATA may still
//! be sent on a stream or a connection, as arithmetic that refuses what the
//! RFC refuses.
//!
//! A window is a signed 31-bit count. DATA takes from it, WINDOW_UPDATE
//! adds to it, and a change of SETTINGS_INITIAL_WINDOW_SIZE moves every
//! stream window by the difference (§6.9.2), which may leave one negative:
//! nothing more is sent on that stream until updates bring it above zero.
//! Past 2^31 − 1 is a FLOW_CONTROL_ERROR, of the stream or of the
//! connection (stream 0) the window belongs to.
//!
//! ```
//! use fastpath_http::h2::{Window, DEFAULT_INITIAL_WINDOW_SIZE};
//!
//! let mut stream = Window::new(DEFAULT_INITIAL_WINDOW_SIZE);
//! stream.consume(60_000, 1).unwrap(); // sent 60,000 bytes on stream 1
//! stream.apply_initial_size_change(DEFAULT_INITIAL_WINDOW_SIZE, 1_000).unwrap();
//! assert_eq!(stream.size(), -59_000);
//! assert_eq!(stream.available(), 0);
//! stream.increase(100_000, 1).unwrap(); // WINDOW_UPDATE
//! assert_eq!(stream.available(), 41_000);
//! assert!(stream.increase(u32::MAX >> 1, 1).is_err()); // past 2^31 - 1
//! ```

use super::frame::{FrameError, Reason, MAX_WINDOW_SIZE};

/// One flow-control window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window(i32);

impl Window {
    /// A window of `size` bytes.
    ///
    /// # Panics
    /// If `size` is past 2^31 − 1: the initial sizes fastpath uses are
    /// checked when read ([`super::Setting::InitialWindowSize`]) or its own.
    pub fn new(size: u32) -> Window {
        assert!(size <= MAX_WINDOW_SIZE, "window of {size}");
        Window(size as i32)
    }

    /// The window: negative after SETTINGS_INITIAL_WINDOW_SIZE shrank it
    /// below what was in flight.
    pub fn size(&self) -> i32 {
        self.0
    }

    /// How many bytes may be sent now: the window, or 0 if it is negative.
    pub fn available(&self) -> u32 {
        self.0.max(0) as u32
    }

    /// Adds a WINDOW_UPDATE's `increment` to the window of `stream_id` (0
    /// for the connection), refusing a window past 2^31 − 1 (§6.9.1) as a
    /// stream error, or a connection error on stream 0. The window is left
    /// as it was on error.
    pub fn increase(&mut self, increment: u32, stream_id: u32) -> Result<(), FrameError> {
        self.add(i64::from(increment))
            .map_err(|reason| FrameError::on(stream_id, reason))
    }

    /// Takes `len` flow-controlled bytes (a DATA frame's whole payload,
    /// padding included) from the window of `stream_id`, refusing more
    /// than the window holds (§6.9.1) as a stream error, or a connection
    /// error on stream 0. Used for what the peer sends, against the windows
    /// fastpath gave; for what fastpath sends, [`Window::available`] says
    /// how much may go first.
    pub fn consume(&mut self, len: u32, stream_id: u32) -> Result<(), FrameError> {
        if len > self.available() {
            return Err(FrameError::on(
                stream_id,
                Reason::WindowExceeded {
                    window: self.0,
                    len,
                },
            ));
        }
        // Within an i32 window that is at least len: no overflow.
        self.0 -= len as i32;
        Ok(())
    }

    /// Moves a stream window by the change of SETTINGS_INITIAL_WINDOW_SIZE
    /// from `old` to `new` (§6.9.2). A window taken past 2^31 − 1 is a
    /// connection error, whatever stream it belongs to; below zero is
    /// allowed. The window is left as it was on error.
    pub fn apply_initial_size_change(&mut self, old: u32, new: u32) -> Result<(), FrameError> {
        self.add(i64::from(new) - i64::from(old))
            .map_err(FrameError::connection)
    }

    fn add(&mut self, delta: i64) -> Result<(), Reason> {
        let sum = i64::from(self.0) + delta;
        // Below −(2^31 − 1) would take more than one initial size's worth
        // of shrinking from a window already empty: never reached by a
        // caller that consumes only what is available, refused all the same.
        if !(-i64::from(MAX_WINDOW_SIZE)..=i64::from(MAX_WINDOW_SIZE)).contains(&sum) {
            return Err(Reason::WindowOverflow {
                window: self.0,
                delta,
            });
        }
        self.0 = sum as i32;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::{ErrorCode, ErrorScope, DEFAULT_INITIAL_WINDOW_SIZE};

    const MAX: i32 = MAX_WINDOW_SIZE as i32;

    #[test]
    fn increase_up_to_the_maximum() {
        let mut w = Window::new(DEFAULT_INITIAL_WINDOW_SIZE);
        w.increase(MAX_WINDOW_SIZE - DEFAULT_INITIAL_WINDOW_SIZE, 1)
            .unwrap();
        assert_eq!(w.size(), MAX);
        assert_eq!(w.available(), MAX_WINDOW_SIZE);

        let e = w.increase(1, 1).unwrap_err();
        assert_eq!(
            e,
            FrameError::stream(
                1,
                Reason::WindowOverflow {
                    window: MAX,
                    delta: 1
                }
            )
        );
        assert_eq!(e.code(), ErrorCode::FlowControlError);
        assert_eq!(w.size(), MAX, "the window changed on error");

        // On stream 0, the connection's window, a connection error.
        let mut c = Window::new(MAX_WINDOW_SIZE);
        let e = c.increase(MAX_WINDOW_SIZE, 0).unwrap_err();
        assert_eq!(e.scope, ErrorScope::Connection);
        assert_eq!(e.code(), ErrorCode::FlowControlError);
    }

    #[test]
    fn consume_within_the_window() {
        let mut w = Window::new(100);
        w.consume(60, 3).unwrap();
        w.consume(40, 3).unwrap();
        assert_eq!(w.size(), 0);
        w.consume(0, 3).unwrap();
        let e = w.consume(1, 3).unwrap_err();
        assert_eq!(
            e,
            FrameError::stream(3, Reason::WindowExceeded { window: 0, len: 1 })
        );
        assert_eq!(e.code(), ErrorCode::FlowControlError);

        let mut c = Window::new(10);
        assert!(c.consume(11, 0).unwrap_err().is_connection_error());
        assert_eq!(c.size(), 10);
        assert!(Window::new(0).consume(u32::MAX, 1).is_err());
    }

    #[test]
    fn initial_size_change_may_go_negative() {
        let mut w = Window::new(DEFAULT_INITIAL_WINDOW_SIZE);
        w.consume(65_000, 1).unwrap();
        w.apply_initial_size_change(DEFAULT_INITIAL_WINDOW_SIZE, 0)
            .unwrap();
        assert_eq!(w.size(), -65_000);
        assert_eq!(w.available(), 0);
        // Nothing may be taken from a negative window.
        assert!(w.consume(1, 1).is_err());
        w.increase(65_001, 1).unwrap();
        assert_eq!(w.available(), 1);

        // Growing is fine up to the maximum, a connection error past it.
        let mut w = Window::new(10);
        w.apply_initial_size_change(0, MAX_WINDOW_SIZE - 10)
            .unwrap();
        assert_eq!(w.size(), MAX);
        let e = w.apply_initial_size_change(0, 1).unwrap_err();
        assert_eq!(
            e,
            FrameError::connection(Reason::WindowOverflow {
                window: MAX,
                delta: 1
            })
        );
        assert_eq!(e.code(), ErrorCode::FlowControlError);
        assert_eq!(w.size(), MAX);
    }

    #[test]
    fn most_negative_window() {
        let mut w = Window::new(0);
        w.apply_initial_size_change(MAX_WINDOW_SIZE, 0).unwrap();
        assert_eq!(w.size(), -MAX);
        assert!(w.apply_initial_size_change(1, 0).is_err());
        assert_eq!(w.size(), -MAX);
        w.increase(MAX_WINDOW_SIZE, 1).unwrap();
        w.increase(MAX_WINDOW_SIZE, 1).unwrap();
        assert_eq!(w.size(), MAX);
    }

    #[test]
    #[should_panic(expected = "window of")]
    fn window_past_the_maximum_is_a_bug() {
        Window::new(1 << 31);
    }
}
