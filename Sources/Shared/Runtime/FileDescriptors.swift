import Foundation

/// The process's open-file limit. A server holding thousands of connections needs as many
/// descriptors; a shell's default soft limit (often 1,024) is raised to the hard limit, which
/// an unprivileged process may do.
public enum FileDescriptors {
    /// Raises the soft limit to the hard one where it is lower and returns the soft limit now.
    @discardableResult
    public static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }
}
