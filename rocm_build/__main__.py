from rocm_build.cli import main

main()
