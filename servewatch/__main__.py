from servewatch.cli import main

raise SystemExit(main())
