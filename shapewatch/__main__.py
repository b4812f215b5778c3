from shapewatch._integrations.cli import main

raise SystemExit(main())
