import { useState, type FormEvent } from "react";
import { useLocation, useNavigate } from "react-router";
import { ApiError } from "../api/client";
import { useSession } from "./SessionContext";

export function LoginPage() {
  const { login } = useSession();
  const navigate = useNavigate();
  const location = useLocation();
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<ApiError | null>(null);
  const [pending, setPending] = useState(false);

  async function submit(event: FormEvent) {
    event.preventDefault();
    setPending(true);
    setError(null);
    try {
      await login(username, password);
      const next = (location.state as { from?: string } | null)?.from ?? "/";
      navigate(next, { replace: true });
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setPending(false);
    }
  }

  const fieldError = (name: string) => (error?.field === name ? error.message : null);
  return (
    <main className="login">
      <form className="login-card" onSubmit={submit} noValidate>
        <h1><span className="logo-mark">P</span> Paddock</h1>
        <p className="muted">Asynchronous LoRA GRPO, live.</p>
        <label>
          Username
          <input name="username" autoComplete="username" autoFocus value={username}
            onChange={(e) => setUsername(e.target.value)} aria-invalid={!!fieldError("username")} />
          {fieldError("username") && <span className="field-error">{fieldError("username")}</span>}
        </label>
        <label>
          Password
          <input name="password" type="password" autoComplete="current-password" value={password}
            onChange={(e) => setPassword(e.target.value)} aria-invalid={!!fieldError("password")} />
          {fieldError("password") && <span className="field-error">{fieldError("password")}</span>}
        </label>
        {error && !error.field && <div className="state-error">{error.message}</div>}
        <button className="btn primary" type="submit" disabled={pending}>
          {pending ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
