"""What servewatch does to a server when the user asked it to act (`servewatch guard`): capture the
stacks of its process tree, signal it, kill it. Nothing here runs unless asked."""
