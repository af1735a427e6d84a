//! Data to stdout. A stdout whose reader went away (`flow task list | head
//! -1`) ends the command at once, quietly, with the status of a process
//! ended by SIGPIPE (141), as other Unix tools end; any other write error
//! ends it with a message and status 2. `println!` would panic
//! instead, with a stack trace.

use std::io::Write;

/// The exit status of a process ended by SIGPIPE (128 + 13).
pub const BROKEN_PIPE_STATUS: i32 = 141;

/// Writes `args` and a newline to stdout.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        eprintln!("flow: cannot write to stdout: {error}");
        std::process::exit(2);
    }
}

/// `println!` to stdout, ending quietly when the reader went away.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

pub(crate) use outln;
