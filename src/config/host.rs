//! [`fqdn`]: the host's fully qualified name, the default of `host-name` (and so of
//! `mail-from`), through `gethostname` and `getaddrinfo`.

use std::ffi::{CStr, CString};

/// The host's fully qualified name, like Python's `socket.getfqdn()`: the canonical name
/// `getaddrinfo(AI_CANONNAME)` gives for `gethostname()`, if it contains a dot, else the host
/// name itself (`localhost` if even that fails).
pub fn fqdn() -> String {
    let host = match nix::unistd::gethostname() {
        Ok(h) => h.to_string_lossy().into_owned(),
        Err(_) => return "localhost".to_string(),
    };
    if host.is_empty() {
        return "localhost".to_string();
    }
    match canonical_name(&host) {
        Some(name) if name.contains('.') => name,
        _ => host,
    }
}

fn canonical_name(host: &str) -> Option<String> {
    use nix::libc;
    let node = CString::new(host).ok()?;
    // SAFETY: addrinfo is plain data (integers and pointers); all-zero is a valid value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut result: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: node is NUL-terminated, hints is initialised, result is written by the call.
    let rc = unsafe { libc::getaddrinfo(node.as_ptr(), std::ptr::null(), &hints, &mut result) };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: result is a valid list returned by getaddrinfo; ai_canonname is NUL-terminated or
    // null; the list is freed exactly once, after the name has been copied.
    unsafe {
        let name = (*result).ai_canonname;
        let out = if name.is_null() {
            None
        } else {
            Some(CStr::from_ptr(name).to_string_lossy().into_owned())
        };
        libc::freeaddrinfo(result);
        out.filter(|n| !n.is_empty())
    }
}
