"""What every command shares: exit statuses and the one-line usage error."""

EXIT_OK, EXIT_NOT_REACHED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input on the command line; printed as one line, exit status 2, never a traceback."""
