from shapewatch._cli import main

raise SystemExit(main())
