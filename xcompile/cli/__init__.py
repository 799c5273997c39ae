"""The compile pipeline's `xrt` subcommands (registered by `xcompile.plugin`)."""
