"""The doctor: reads a dead server's log (postmortem) and reasons from a complaint to the quantity that
decides it (diagnose). Pure logic here; files, HTTP and printing live in the commands."""
