from runlib.cli import main

raise SystemExit(main())
