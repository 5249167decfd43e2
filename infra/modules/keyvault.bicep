// Key Vault in RBAC mode with purge protection: every secret the Function App reads arrives
// through a Key Vault reference (@Microsoft.KeyVault(SecretUri=...)) resolved with the
// managed identity (keyVaultReferenceIdentity), never as a literal app setting.
//
// Secrets (names are fixed; main.bicep builds the references from them):
//   microsoft-app-password  the bot's Entra app client secret (from the deployment parameter)
//   audit-hmac-keys         COPILOT_AUDIT_HMAC_KEYS, kid:base64key list, newest first   (make infra-secrets)
//   token-encryption-key    COPILOT_TOKEN_ENCRYPTION_KEY, a Fernet key                   (make infra-secrets)
//   trace-pseudonym-key     COPILOT_TRACE_PSEUDONYM_KEY, base64 32 bytes                 (make infra-secrets)
//   database-url            DATABASE_URL of the app's unprivileged login                 (the admin, after db migrate)
//   azure-openai-api-key    AZURE_OPENAI_API_KEY, when the template deploys Azure OpenAI (openai.bicep)

param name string
param location string
param tags object
param readerPrincipalId string
@secure()
param botClientSecret string
@description('The day that secret expires (yyyy-mm-dd): the vault secret carries it (and a malformed date fails the deployment).')
param botClientSecretExpiresOn string
@description('Object id of the admin (user or group) who writes the generated secrets; empty = none.')
param secretsOfficerObjectId string = ''
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param secretsOfficerType string = 'Group'
param allowPublicAccess bool = false
@description('Log Analytics workspace the resource\'s diagnostic logs and metrics go to.')
param workspaceId string
param adminIpAddress string = ''

var reachable = allowPublicAccess || (!empty(adminIpAddress))

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  //checkov:skip=CKV_AZURE_109:defaultAction is Deny unless allowPublicAccess is passed (checkov cannot evaluate the parameter); tests/infra/test_template_policy.py checks the default
  //checkov:skip=CKV_AZURE_189:publicNetworkAccess is Disabled unless allowPublicAccess or an admin IP is passed (checkov cannot evaluate the expression); tests/infra/test_template_policy.py checks the default
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: tenant().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enablePurgeProtection: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 90
    publicNetworkAccess: reachable ? 'Enabled' : 'Disabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: allowPublicAccess ? 'Allow' : 'Deny'
      ipRules: empty(adminIpAddress) ? [] : [
        {
          value: adminIpAddress
        }
      ]
    }
  }
}

resource appPassword 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  parent: vault
  name: 'microsoft-app-password'
  properties: {
    value: botClientSecret
    contentType: 'text/plain'
    attributes: {
      // The Entra app credential's own expiry; rotate both together (docs/ADMIN.md, Key rotation).
      exp: dateTimeToEpoch('${botClientSecretExpiresOn}T00:00:00Z')
    }
  }
}

// Key Vault Secrets User: the Function App resolves its references.
resource reader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, readerPrincipalId, '4633458b-17de-408a-b874-0445c86b69e6')
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '4633458b-17de-408a-b874-0445c86b69e6')
    principalId: readerPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Key Vault Secrets Officer for the admin who runs `make infra-secrets` and rotates keys.
resource officer 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(secretsOfficerObjectId)) {
  name: guid(vault.id, secretsOfficerObjectId, 'b86a8fe4-44ce-4948-aee5-eccb2c155cd7')
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'b86a8fe4-44ce-4948-aee5-eccb2c155cd7')
    principalId: secretsOfficerObjectId
    principalType: secretsOfficerType
  }
}

// Audit and diagnostic logs, and metrics, to Log Analytics (alerts in alerts.bicep query them).
resource vaultDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: vault
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output id string = vault.id
output name string = vault.name
output uri string = vault.properties.vaultUri
