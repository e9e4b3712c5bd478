//! Bearer tokens: from the config, an environment variable, a file or a command.
