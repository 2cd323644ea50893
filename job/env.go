package job

// Env are the environment's values of the fields that fall back to one
// (Field.Env), by field name. The command line reads them once, at its
// entry (EnvFrom(os.Getenv)); a web request and a test have none, so
// that no answer depends on the shell it was asked from.
type Env map[string]string

// EnvFrom reads the environment variables of the table's fields through
// getenv: the first set of a field's variables gives its value.
func EnvFrom(getenv func(string) string) Env {
	env := Env{}
	for _, f := range Fields {
		for _, name := range f.Env {
			if v := getenv(name); v != "" {
				env[f.Name] = v
				break
			}
		}
	}
	return env
}

// orEnv is the value v of field name, or where it is empty the
// environment's.
func (e Env) orEnv(name, v string) string {
	if v == "" {
		return e[name]
	}
	return v
}
