// How the daemon tells what loading its configuration found: each diagnostic, and each file or directory the trust
// rule refused, under a MESSAGE_ID of its own.

import BGTaskConfig
import BGTaskSystem

/// Logs the outcome of loading the configuration, at start (`bgtaskd`'s main) and on every reload (SIGHUP).
public enum ConfigurationLog {
    /// Logs `result`: each diagnostic (an error as an error, a warning as a warning), then each refused file or
    /// directory as an error naming it, the rule it fails and what follows ("refused; its settings are not used"),
    /// with `MESSAGE_ID=` `MessageID.configurationRefused` and `BGTASK_CONFIG_FILE=` its path.
    public static func log(_ result: ConfigurationLoadResult, to logger: Logger) {
        for diagnostic in result.diagnostics {
            logger.log(diagnostic.severity == .error ? .error : .warning, "\(diagnostic)")
        }
        for refused in result.refused {
            logger.error(
                "\(refused.path): \(refused.refusal); \(refused.consequence)",
                [.configurationFile(refused.path), .messageID(MessageID.configurationRefused)])
        }
    }
}

extension LogField {
    /// `BGTASK_CONFIG_FILE=`: the configuration file or directory the message is about.
    static func configurationFile(_ path: String) -> LogField { LogField("BGTASK_CONFIG_FILE", path) }
}
